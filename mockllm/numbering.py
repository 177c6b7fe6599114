"""How words number a session's calls: from 0, and saying so.

A report's JSON (`"call": 0`), the journal, the inspector and fault specs (`{"call": 2}`) count a
session's calls from 0, as a script's entries are indexed. Text that names a call uses the same
number and says which numbering it is (`call 0 (0-based)`), so a failure message, a report line and
the JSON beside them never disagree by one.
"""

from __future__ import annotations


def call_name(call: int) -> str:
    """`call 2 (0-based)`: the call at index 2 of its session's script (its third)."""
    return f"call {call} (0-based)"


def calls_name(first: int, last: int) -> str:
    """`calls 1-3 (0-based)`, or `call_name(first)` when they are one."""
    return call_name(first) if first == last else f"calls {first}-{last} (0-based)"
