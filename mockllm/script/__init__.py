"""Derivation (pure): a session's log becomes its replay script of entries."""
