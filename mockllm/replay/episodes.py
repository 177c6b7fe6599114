"""Under new_episodes, the sessions that left the recording: a call the recording cannot serve (an
unrecorded session, a call past its script's end, a diverged call) goes to the upstream instead of
failing, and its session is live from then on. The report lists them (`WentLive`: where and why),
and the recording is rewritten from them when the run ends (`mockllm.record.episodes`)."""

from __future__ import annotations

from mockllm.replay.binding import Bindings
from mockllm.replay.journal import CallRecord
from mockllm.replay.outcome import Live
from mockllm.replay.report import WentLive
from mockllm.scenario.load import Scenario


class LiveSessions:
    """A run's sessions that went live, by live id, in the order they went."""

    def __init__(self, scenario: Scenario, bindings: Bindings) -> None:
        self.scenario = scenario
        self.bindings = bindings
        self.by_live_id: dict[str, WentLive] = {}

    def get(self, live_id: str) -> WentLive | None:
        return self.by_live_id.get(live_id)

    def go(self, live_id: str, script: int | None, call: int, code: str, why: str) -> WentLive:
        """Session `live_id` leaves the recording at its call `call` (0-based); `script`: the recorded
        session it is bound to (it wants none of the rest of that script), None for a new one."""
        if script is not None:
            binding = self.bindings.of_script(script) or self.bindings.bind(script, live_id)
            binding.live = True
        file = self.scenario.sessions[script].file if script is not None else None
        went = self.by_live_id[live_id] = WentLive(file, live_id, call, code, why)
        return went

    def outcome(self, record: CallRecord, went: WentLive, named: bool) -> Live:
        """A call of a session that went live: it goes to the upstream (`named`: its live id came in a
        session header, so the rewrite may keep it as the new session's id)."""
        record.kind, record.script, record.call = "live", went.session, went.call
        record.diverged = went.why if went.code == "request_diverged" else None
        script = next((s for s in self.scenario.sessions if s.file == went.session), None)
        return Live(record, went.live_id, script, went.call, named)

    def values(self) -> list[WentLive]:
        return list(self.by_live_id.values())
