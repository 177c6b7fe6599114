"""Every run of a server: the default run per scenario, runs created by clients, and the last few
that ended (the inspector still shows them, and a failing test fetches its report after ending it).

Both are bounded. A client may create runs and never end them (a crashed test process, a script in
a loop): past `LIVE_KEPT` live runs, creating one first ends the run that has been idle the longest
(no call since it was created or since its last call), as `DELETE` would; a run that records is
never ended so (its recording is written only when its client ends it), nor one holding a stream,
and when no live run can be ended, a new one is refused (`TooManyRuns`). Ended runs are kept `ENDED_KEPT` at most.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from mockllm.options import RunSettings, ServeOptions
from mockllm.replay.catalog import Catalog
from mockllm.replay.journal import Journal
from mockllm.replay.run import Run
from mockllm.scenario.load import Scenario

# Ended runs kept for the inspector and reports: enough for a watched suite's latest tests, and
# bounded, since each keeps its journal (up to journal_limit calls of up to 64 KiB each).
ENDED_KEPT = 16
# Live runs kept: far more than a test suite runs at once (each is one test's run), and bounded, since
# each keeps a journal. A module attribute, read when a run is created, so a test may lower it.
LIVE_KEPT = 2000


class TooManyRuns(Exception):
    """LIVE_KEPT runs are live and every one of them records: none can be ended to make room."""

Change = Literal["created", "ended", "reset"]
# Told of every run created (default runs too), ended or reset; the server's inspector events.
Listener = Callable[[Change, Run], None]


class Runs:
    def __init__(self, scenarios: dict[str, Scenario], options: ServeOptions,
                 catalogs: Mapping[str, Catalog] | None = None) -> None:
        self._scenarios = scenarios
        self._options = options
        self._settings = RunSettings.of(options)
        # One catalog per scenario, shared by its runs: replies are rendered once, not per run.
        self.catalogs = dict(catalogs) if catalogs is not None else {
            name: Catalog(scenario) for name, scenario in scenarios.items()}
        self._runs: dict[str, Run] = {}
        self._defaults: dict[str, str] = {}
        self._ids = itertools.count(1)
        self._ended: OrderedDict[str, Run] = OrderedDict()
        self.listener: Listener | None = None
        # The server's own address (`http://host:port`), once it listens: what the commands its
        # refusals advise are sent to (`curl -X DELETE {origin}/_mockllm/runs/{run}`).
        self.origin = ""

    def settings(self, overrides: Mapping[str, Any] | None = None) -> RunSettings:
        """The server's settings with a run's JSON `overrides` over them (`POST /_mockllm/runs` fields;
        a bad one is a ValueError naming it)."""
        return self._settings.with_json(overrides) if overrides else self._settings

    def create(self, scenario: str, overrides: Mapping[str, Any] | None = None, *, episodes: bool = False) -> Run:
        """A new run of `scenario`, with the server's settings and a run's JSON `overrides` over them;
        `episodes`: under new_episodes, what the recording cannot serve goes to the upstream."""
        options = self._options
        self._make_room()
        run = Run(f"run-{next(self._ids)}", self._scenarios[scenario], self.settings(overrides), options.headerless,
                  journal=Journal(options.journal_limit), catalog=self.catalogs[scenario], episodes=episodes)
        if overrides and overrides.get("faults"):
            run.check_faults()  # a fault for a session this scenario lacks is the caller's mistake: say so
        run.origin = self.origin
        self._runs[run.id] = run
        self._tell("created", run)
        return run

    def create_recording(self, name: str, folder: Path, overrides: Mapping[str, Any] | None = None) -> Run:
        """A new run that records scenario `name` (to be written at `folder`) from scratch: every call
        goes to the upstream, nothing is replayed."""
        self._make_room()
        scenario = Scenario(name, folder, [])
        run = Run(f"run-{next(self._ids)}", scenario, self.settings(overrides), self._options.headerless,
                  journal=Journal(self._options.journal_limit), catalog=Catalog(scenario), recording=True)
        run.origin = self.origin
        self._runs[run.id] = run
        self._tell("created", run)
        return run

    def _make_room(self) -> None:
        """End the live run idle the longest (by its last call, else its creation) when LIVE_KEPT are live."""
        if len(self._runs) < LIVE_KEPT:
            return
        idle = [run for run in self._runs.values() if not run.recording and not run.episodes and not run.holding]
        if not idle:
            raise TooManyRuns(f"{len(self._runs)} runs are live and every one records or holds a stream; end one "
                              "(DELETE /_mockllm/runs/RUN) before creating another")
        self.end(min(idle, key=_last_used).id)

    def discard(self, run_id: str) -> None:
        """Forget a run that was never used (its recording could not begin): not kept as ended."""
        run = self._runs.pop(run_id, None)
        if run is not None:
            self._tell("ended", run)

    def add_scenario(self, scenario: Scenario) -> None:
        """A scenario recorded (or recorded anew) while serving: later runs replay it, and its default
        run starts over on it."""
        self._scenarios[scenario.name] = scenario
        self.catalogs[scenario.name] = Catalog(scenario)
        self._defaults.pop(scenario.name, None)

    def reset(self, run_id: str) -> Run | None:
        """Start a run over: a fresh run with the same id, scenario and settings, so its base URL
        stays valid for the agent under test. None when no such run is live."""
        old = self._runs.get(run_id)
        if old is None:
            return None
        run = Run(old.id, old.scenario, old.settings, old.headerless, journal=Journal(self._options.journal_limit),
                  catalog=old.catalog, default=old.default, recording=old.recording, episodes=old.episodes)
        run.origin = self.origin
        self._runs[run_id] = run
        self._tell("reset", run)
        return run

    def default(self, scenario: str) -> Run:
        """The run behind /scenarios/{name}/v1, created on first use."""
        run_id = self._defaults.get(scenario)
        if run_id is None or run_id not in self._runs:
            run = self.create(scenario)
            run.default = True
            self._defaults[scenario] = run.id
            return run
        return self._runs[run_id]

    def default_id(self, scenario: str) -> str | None:
        """The id of the scenario's default run, once it has been used."""
        run_id = self._defaults.get(scenario)
        return run_id if run_id in self._runs else None

    def get(self, run_id: str) -> Run | None:
        return self._runs.get(run_id)

    def end(self, run_id: str) -> Run | None:
        """Remove a run; a default run is replaced by a fresh one on next use."""
        run = self._runs.pop(run_id, None)
        if run is not None:
            self._ended[run_id] = run
            while len(self._ended) > ENDED_KEPT:
                self._ended.popitem(last=False)
            self._tell("ended", run)
        return run

    def find(self, run_id: str) -> tuple[Run, bool] | None:
        """A live run, or one of the last ENDED_KEPT ended ones, and whether it ended."""
        run = self._runs.get(run_id)
        if run is not None:
            return run, False
        run = self._ended.get(run_id)
        return (run, True) if run is not None else None

    def listing(self) -> Iterator[tuple[Run, bool]]:
        """The live runs, then the ended ones still kept (each with whether it ended), oldest first."""
        yield from ((run, False) for run in self._runs.values())
        yield from ((run, True) for run in self._ended.values())

    def _tell(self, change: Change, run: Run) -> None:
        if self.listener is not None:
            self.listener(change, run)

    def __len__(self) -> int:
        return len(self._runs)


def _last_used(run: Run) -> float:
    """When a run last took a call (its journal's latest arrival), else when it was created."""
    last = run.journal.latest()
    return last.at if last is not None else run.created
