"""Replay state (no HTTP): runs, binding, cursors, routing, divergence, journal, reports."""
