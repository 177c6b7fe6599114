"""Binding: which recorded session's script a live session replays.

A live session (named by a request header, or found by its conversation) binds on its first call:
to the script with the same recorded id if there is one; else, under `--bind content` (the
default), to the first unbound script whose recorded first inputs match its request, so
concurrent subagents bind right whatever order they start in; else to the next unbound script in
script order (first-call order, as dsh binds), and the run's report notes that it was bound by
arrival for want of a match. Each binding then has its own cursor.

Twins, scripts whose first inputs are equal (specialists asked the same question, differing by
their instructions: openai-agents' agents-as-tools translators), are told apart by the system
prompt their log names (`request/header`, as the recorder writes it): the first twin whose
recorded system prompt matches the request's, masked as inputs are, wins. Twins with no recorded
prompt, or none that matches, bind among themselves in script order: the order their first calls
were recorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from mockllm.options import RunSettings
from mockllm.replay.divergence import Comparison, compare, live_inputs, same_text
from mockllm.scenario.load import Scenario
from mockllm.wire.request import Request, system_text


@dataclass(slots=True)
class Binding:
    script: int  # index into scenario.sessions
    live_id: str
    cursor: int = 0  # entries served so far
    continued: int | None = None  # the call whose reply the latest chained request continued
    retries: int = 0  # requests that repeated a call whose answer did not reach the client whole
    # The call whose stream the client left before its end, and a digest of that request's body:
    # a retry of it gets the same entry again (replay/run.py, the retry rule).
    incomplete: tuple[int, bytes] | None = None
    live: bool = False  # under new_episodes, it left the recording: the rest of its script is not wanted


class Bindings:
    """A run's bindings, by live id and by script."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.by_live_id: dict[str, Binding] = {}
        self._by_script: dict[int, Binding] = {}

    def get(self, live_id: str) -> Binding | None:
        return self.by_live_id.get(live_id)

    def of_script(self, script: int) -> Binding | None:
        """The binding of script `script`, once a live session is bound to it."""
        return self._by_script.get(script)

    def __iter__(self) -> Iterator[Binding]:
        return iter(self._by_script.values())

    def bind(self, script: int, live_id: str) -> Binding:
        binding = self.by_live_id[live_id] = self._by_script[script] = Binding(script, live_id)
        return binding

    def file_of(self, live_id: str) -> str | None:
        """The recorded session file `live_id` is bound to, if it is bound."""
        binding = self.by_live_id.get(live_id)
        return self.scenario.sessions[binding.script].file if binding is not None else None

    def choose(self, live_id: str, request: Request | None, settings: RunSettings) -> tuple[int | None, bool]:
        """The script a new live session binds to (None: every script with entries is bound), and
        whether content binding found no match and fell back to first-call order."""
        sessions = self.scenario.sessions
        chosen = next((i for i, s in enumerate(sessions) if s.id == live_id and i not in self._by_script), None)
        if chosen is not None:
            return chosen, False
        # Sessions recorded with no model calls never call, so they take no place in first-call order.
        first = next((i for i, s in enumerate(sessions) if i not in self._by_script and s.entries), None)
        if settings.bind != "content" or request is None or first is None:
            return first, False
        chosen = self._by_content(request, first, settings)
        return (first, True) if chosen is None else (chosen, False)

    def _by_content(self, request: Request, first: int, settings: RunSettings) -> int | None:
        """The unbound script from `first` on whose first recorded inputs match the request's: the
        first of them, or among twins the first whose recorded system prompt matches too."""
        sessions = self.scenario.sessions
        live = live_inputs(request.tail)
        matches = []
        for i in range(first, len(sessions)):
            recorded = sessions[i].inputs[0] if sessions[i].inputs else None
            how = Comparison(settings.masks, settings.cwd, self.scenario.model_ids(i))
            if (i not in self._by_script and sessions[i].entries and recorded
                    and compare(recorded.items, live, how) is None):
                matches.append(i)
        if len(matches) > 1 and any(sessions[i].system is not None for i in matches):
            system = system_text(request.messages)
            how = Comparison(settings.masks, settings.cwd)
            for i in matches:
                recorded_system = sessions[i].system
                if system is not None and recorded_system is not None and same_text(recorded_system, system, how):
                    return i
        return matches[0] if matches else None

    def continued(self, reply: tuple[int, int] | None) -> Binding | None:
        """The session a request continuing reply (script, call) belongs to, if it is a step of its chain.

        It is when that reply is the latest one the session was served (the next step), or the one
        its latest chained request continued (a retry of that step). A request continuing an older
        reply branches off the chain, as a fork child continues its parent's earlier turn: it is
        routed by its conversation, like a fork that sends its history. So is a reply id this run
        never served (another run's, or not one of ours).
        """
        binding = self._by_script.get(reply[0]) if reply is not None else None
        if binding is None or reply is None:
            return None
        call = reply[1]
        if call == binding.cursor - 1 or call == binding.continued:
            binding.continued = call
            return binding
        return None

    @property
    def drained(self) -> bool:
        """Every script with entries was bound and served in full (or left for the upstream)."""
        return all(
            (b := self._by_script.get(i)) is not None and (b.cursor >= len(s.entries) or b.live)
            for i, s in enumerate(self.scenario.sessions)
            if s.entries
        )
