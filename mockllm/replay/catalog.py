"""Every entry of a scenario rendered to a dialect's bytes once, where the bytes are fixed.

Entries are rendered per dialect on first use and kept. Entries whose strings hold
`{{fromRequest:…}}` depend on the request, and entries holding `{{cwd}}` depend on the run's cwd;
those are rendered per request instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from mockllm.options import ServeOptions, warm_names
from mockllm.scenario.envelopes import WireCall
from mockllm.scenario.load import Scenario
from mockllm.script.derive import Timing
from mockllm.script.entries import FROM_REQUEST, ChunksEntry, Entry
from mockllm.script.templates import CWD, resolve_entry
from mockllm.wire import DIALECTS, dialect_named, recorded
from mockllm.wire.dialect import Dialect
from mockllm.wire.envelope import Envelope
from mockllm.wire.render import Reading, read
from mockllm.wire.reply import Reply
from mockllm.wire.request import Request
from mockllm.wire.whole_calls import cut_calls

DEFAULT_MODEL = "mockllm"


@dataclass(frozen=True, slots=True)
class _Placeholders:
    per_request: bool  # holds {{fromRequest:…}}
    mentions_cwd: bool


@dataclass(frozen=True, slots=True)
class _Rendered:
    envelope: Envelope
    reply: Reply | None  # None: rendered per request


class Catalog:
    """The rendered replies of one scenario, indexed by (dialect, script, call)."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        # The model the recording called: as its logs name it, else as the provider named it (a
        # tree `mockllm record` wrote keeps each call's in `envelopes.jsonl`), else made up.
        self.model = next((s.model for s in scenario.sessions if s.model), None) or next(
            (w.model for s in scenario.sessions for w in s.wires if w is not None and w.model), DEFAULT_MODEL)
        # Scripts by index: the sessions' in script order, then the side routes' (side_script()).
        self._scripts = [s.entries for s in scenario.sessions] + [r.entries for r in scenario.side_routes]
        self._created = [int(s.created_at // 1000) for s in scenario.sessions] + [0] * len(scenario.side_routes)
        self._models = [self.model] * len(scenario.sessions) + [r.model for r in scenario.side_routes]
        self._placeholders = [[_scan(entry) for entry in entries] for entries in self._scripts]
        self._rendered: dict[str, list[list[_Rendered | None]]] = {}
        self._readings: list[list[Reading | None]] = [[None] * len(entries) for entries in self._scripts]
        self._reply_ids: dict[str, dict[str, tuple[int, int]]] = {}  # per dialect, provider ids replayed
        self._cut: dict[tuple[int, int], tuple[str, ...]] = {}  # (script, call) -> cut_calls

    def entry(self, script: int, call: int) -> Entry:
        return self._scripts[script][call]

    def timing(self, script: int, call: int) -> Timing | None:
        """When entry `call`'s chunks were recorded; None when they were not (projected, scripted, side route)."""
        sessions = self.scenario.sessions  # side routes (scripts past the sessions) keep no times
        timings = sessions[script].timings if script < len(sessions) else []
        return timings[call] if call < len(timings) else None

    def side_script(self, route: int) -> int:
        """The script index of side route `route`."""
        return len(self.scenario.sessions) + route

    def warm(self, dialects: Sequence[Dialect]) -> None:
        """Render every entry in `dialects` now (at start-up, off the request path), and each call
        whose provider's answer was recorded in the dialect it was recorded in: checking that
        answer against the log costs more than rendering the call, so it is not left to a client."""
        for script, entries in enumerate(self._scripts):
            for call in range(len(entries)):
                for dialect in dialects:
                    self._cached(dialect, script, call)
                wire = self._wire(script, call)
                own = dialect_named(wire.dialect) if wire is not None else None
                if own is not None and own not in dialects:
                    self._cached(own, script, call)

    @property
    def rendered_in(self) -> tuple[str, ...]:
        """The dialects some call has been rendered in so far (at start-up or on a request)."""
        return tuple(self._rendered)

    def reply(self, dialect: Dialect, script: int, call: int, request: Request | None, cwd: str | None) -> Reply:
        """The reply for entry `call` of script `script`; raises TemplateError for an unmatched template."""
        rendered = self._cached(dialect, script, call)
        if rendered.reply is not None and not (cwd is not None and self._placeholders[script][call].mentions_cwd):
            return rendered.reply
        entry = self._scripts[script][call]
        haystack = request.raw_conversation if request is not None else []
        return dialect.render(read(resolve_entry(entry, haystack, cwd)), rendered.envelope)

    def _cached(self, dialect: Dialect, script: int, call: int) -> _Rendered:
        table = self._rendered.get(dialect.name)
        if table is None:
            table = self._rendered[dialect.name] = [[None] * len(entries) for entries in self._scripts]
        rendered = table[script][call]
        if rendered is None:
            rendered = table[script][call] = self._render(dialect, script, call)
        return rendered

    def _render(self, dialect: Dialect, script: int, call: int) -> _Rendered:
        envelope = Envelope(dialect.reply_id(script, call), self._created[script], self._models[script])
        wire = self._wire(script, call)
        if wire is not None:  # the provider's model in every dialect; in its own, its id and time too
            envelope = recorded.envelope(wire, dialect, envelope)
        placeholders = self._placeholders[script][call]
        if placeholders.per_request:
            return _Rendered(envelope, None)
        reading = self._reading(script, call)
        reply = dialect.render(reading, envelope)
        entry = reading.entry
        # In the dialect it was recorded in, what the provider sent, while it still says what the
        # log says (`wire.recorded`); a call naming the run's folder is rendered per run instead.
        if (wire is not None and wire.dialect == dialect.name and isinstance(entry, ChunksEntry)
                and not placeholders.mentions_cwd):
            sources = recorded.says(dialect, wire, entry.chunks)
            if sources is not None:
                reply = recorded.replayed(dialect, wire, sources, reply)
        return _Rendered(envelope, reply)

    def _reading(self, script: int, call: int) -> Reading:
        """Entry `call` of script `script`, read once for every dialect: a call first asked for in
        another one only takes its events."""
        reading = self._readings[script][call]
        if reading is None:
            reading = self._readings[script][call] = read(self._scripts[script][call])
        return reading

    def calls_tools(self, script: int, call: int) -> bool:
        """Whether entry `call` of script `script` calls a tool, as its reading shows: the entry
        read once, where finding it out walked every chunk again (a cost on a scenario's first
        replay, where every call is a first)."""
        reading = self._reading(script, call)
        return bool(reading.tool_deltas) or any(block.type == "tool-call" for block in reading.ended.values())

    def tools_called(self, script: int, call: int) -> tuple[str, ...]:
        """The tools entry `call` of script `script` calls, in block order (`Scenario.tools_called`)."""
        return self.scenario.tools_called(script, call) if self.calls_tools(script, call) else ()

    def cut_calls(self, script: int, call: int) -> tuple[str, ...]:
        """The tool calls of entry `call` of script `script` recorded cut mid-arguments (`whole_calls`),
        found once per scenario; none in an entry that calls no tool."""
        cut = self._cut.get((script, call))
        if cut is None:
            cut = self._cut[(script, call)] = (
                cut_calls(self._scripts[script][call]) if self.calls_tools(script, call) else ())
        return cut

    def reply_of(self, dialect: Dialect, reply_id: str) -> tuple[int, int] | None:
        """The (script, call) a reply id this scenario answers with names: one mockllm made up
        (`Dialect.reply_of`), or a provider's, replayed in the dialect it was recorded in."""
        ids = self._reply_ids.get(dialect.name)
        if ids is None:
            ids = self._reply_ids[dialect.name] = {
                wire.reply_id: (script, call)
                for script, session in enumerate(self.scenario.sessions)
                for call, wire in enumerate(session.wires)
                if wire is not None and wire.dialect == dialect.name and wire.reply_id is not None}
        # A provider's id first: a recording of a mockllm replay holds ids that look made up.
        return ids.get(reply_id) or dialect.reply_of(reply_id)

    def _wire(self, script: int, call: int) -> WireCall | None:
        """What the provider sent for entry `call` of script `script`, if the recorder kept it."""
        sessions = self.scenario.sessions
        wires = sessions[script].wires if script < len(sessions) else ()
        return wires[call] if call < len(wires) else None


def _scan(entry: Entry) -> _Placeholders:
    encoded = msgspec.json.encode(entry).decode()
    return _Placeholders(FROM_REQUEST.search(encoded) is not None, CWD in encoded)


def warm(catalog: Catalog, options: ServeOptions) -> None:
    """Render `catalog`'s calls in the dialects `options.warm` names, before any request asks (none:
    every call is rendered on its first request, in whatever dialect asks)."""
    names = warm_names(options.warm)
    if names:
        catalog.warm([dialect for dialect in DIALECTS if dialect.name in names])
