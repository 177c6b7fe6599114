"""What real agents vary between runs, masked before a request is compared with its recording.

Built in (on by default; `--normalize false` turns them off): UUIDs, hex ids, ISO dates and
times, measured durations and temporary folders. Real agents put them in every tool result:
Claude Code's subagent results end `agentId: a6538a2 … duration_ms: 24737`, its background
tasks' notices carry `<duration_ms>287</duration_ms>`, Codex's shell results carry
`"duration_seconds": 0.4` or `Wall time: 0.4 seconds`. A run's own
`--ignore-input REGEX` masks come first. Each kind of span becomes its own placeholder on both sides (`<uuid>`,
`<datetime>`…; a user mask becomes `<ignored>`), so a report's expected / got / diff show where
the masked spans were, and two texts that differ only there compare equal.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

Mask = tuple[re.Pattern[str], str]  # a pattern and what its matches become

IGNORED = "<ignored>"

BUILTIN: tuple[Mask, ...] = (
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<uuid>"),
    # An ISO 8601 date, with a time and zone if given; then a bare time of day.
    (re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b"),
     "<datetime>"),
    (re.compile(r"\b\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\b"), "<time>"),
    # Hex ids of 7 or more digits with letters and digits both (a commit, short or whole; a request id;
    # Claude Code's `agentId: a6538a2`), not words or numbers.
    (re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,}\b", re.IGNORECASE), "<hex>"),
    # A duration by its name, whatever its unit: `duration_ms: 24737`, `"duration_seconds": 0.4`,
    # `elapsed=3` (from the name on: a search for two words is cheap, a word around them is not).
    (re.compile(r"(?:duration|elapsed)\w*\"?\s*[:=]\s*\d+(?:\.\d+)?"), "<duration>"),
    # The same as an XML element: Claude Code's background-task notices, `<duration_ms>287</duration_ms>`.
    (re.compile(r"(<(?:duration|elapsed)\w*>)\s*\d+(?:\.\d+)?\s*(?=</)"), r"\1<duration>"),
    (re.compile(r"\b\d+(?:\.\d+)?\s?ms\b"), "<ms>"),
    # Seconds: `Wall time: 0.4 seconds`, `took 12s`, `3.5 sec`.
    (re.compile(r"\b\d+(?:\.\d+)?(?:\s?(?:secs?|seconds?)|s)\b"), "<seconds>"),
    # Temporary folders: /tmp/…, /var/folders/…/T/… (macOS), up to the next space or quote.
    (re.compile(r"(?:/private)?(?:/tmp|/var/tmp|/var/folders/[^\s/]+/[^\s/]+/T)/[^\s'\"`]*"), "<tmp>"),
)


def masks_for(ignore_input: Sequence[re.Pattern[str]], normalize: bool) -> tuple[Mask, ...]:
    """A run's masks: its own `--ignore-input` patterns, then the built-in ones when `normalize`."""
    own = tuple((pattern, IGNORED) for pattern in ignore_input)
    return own + BUILTIN if normalize else own


# Texts up to this many characters have their masked form remembered (the last CACHED of them):
# content binding compares one live request with every unbound script's first inputs, and the
# review compares it again, so without it the same texts went through every mask many times over
# (measured: the streaming bench's server CPU per request went from 0.23x to 0.71x of the baseline
# when binding by content became the default). Longer texts are masked each time, so the cache's
# memory stays bounded.
CACHED_LENGTH = 8192
CACHED = 2048


def masked(text: str, masks: tuple[Mask, ...]) -> str:
    if not masks:
        return text
    if len(text) <= CACHED_LENGTH:
        return _masked_remembered(text, masks)
    return _mask(text, masks)


def _mask(text: str, masks: tuple[Mask, ...]) -> str:
    for pattern, placeholder in masks:
        text = pattern.sub(placeholder, text)
    return text


_masked_remembered = functools.lru_cache(maxsize=CACHED)(_mask)


# A `<system-reminder>` block, with the blank space before it: Claude Code appends one (a context-budget
# note, a reminder of the task list) to a tool result when it decides to, so the same result comes
# with it in one run and without it in the next.
REMINDER = re.compile(r"\s*<system-reminder>.*?</system-reminder>", re.DOTALL)
REMINDER_TAG = "<system-reminder>"


def without_reminders(text: str) -> str:
    """`text` without its `<system-reminder>` blocks, and without the blank space at its end (what
    was around a block appended last): a tool result, compared loosely by default."""
    return REMINDER.sub("", text).rstrip()
