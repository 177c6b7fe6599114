"""Every entry of a scenario rendered to wire bytes once, at load time, where the bytes are fixed.

Entries whose strings hold `{{fromRequest:…}}` depend on the request, and entries holding
`{{cwd}}` depend on the run's cwd; those are rendered per request instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from mockllm.entries import FROM_REQUEST, Entry
from mockllm.scenario import Scenario
from mockllm.templates import CWD, resolve_entry
from mockllm.wire.openai import Envelope, Reply, render_entry

DEFAULT_MODEL = "mockllm"


@dataclass(frozen=True, slots=True)
class _Rendered:
    envelope: Envelope
    reply: Reply | None  # None: rendered per request
    mentions_cwd: bool


class Catalog:
    """The rendered replies of one scenario, indexed by (script, call)."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.model = next((s.model for s in scenario.sessions if s.model), DEFAULT_MODEL)
        self._rendered = [
            [self._render(i, j, entry) for j, entry in enumerate(session.entries)]
            for i, session in enumerate(scenario.sessions)
        ]

    def _render(self, script: int, call: int, entry: Entry) -> _Rendered:
        created = int(self.scenario.sessions[script].created_at // 1000)
        envelope = Envelope(f"chatcmpl-mockllm-{script}-{call}", created, self.model)
        encoded = msgspec.json.encode(entry).decode()
        per_request = FROM_REQUEST.search(encoded) is not None
        return _Rendered(envelope, None if per_request else render_entry(entry, envelope), CWD in encoded)

    def reply(self, script: int, call: int, messages: list[Any], cwd: str | None) -> Reply:
        """The reply for entry `call` of script `script`; raises TemplateError for an unmatched template."""
        rendered = self._rendered[script][call]
        if rendered.reply is not None and not (cwd is not None and rendered.mentions_cwd):
            return rendered.reply
        entry = self.scenario.sessions[script].entries[call]
        return render_entry(resolve_entry(entry, messages, cwd), rendered.envelope)
