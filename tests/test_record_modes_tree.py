"""Record modes write the tree `mockllm record` writes: under `new_episodes` a new fork gets its
parent's turns as its seed, and a side route's model's calls are the route's script, never a
session's; through the openai SDK against a scripted upstream, then replayed offline under record
mode `none`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import mockllm
from mockllm.cli.validate import check_suite
from tests.logbuilder import chunks_entry, text_call
from tests.scripted_upstream import ScriptedUpstream

KEY = "sk-live-do-not-record-0123456789"


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as up:
        yield up


class Agent:
    """One session's conversation, streamed through the openai SDK with its lineage headers."""

    def __init__(self, run: mockllm.Run, session: str, history: list[Any] | None = None, **lineage: str) -> None:
        self.client = openai.OpenAI(base_url=run.base_url, api_key=KEY, max_retries=0,
                                    default_headers={**run.headers(session), **lineage})
        self.messages: list[Any] = list(history or [])

    def say(self, text: str) -> str:
        self.messages.append({"role": "user", "content": text})
        stream = self.client.chat.completions.create(model="m", messages=self.messages, stream=True)
        answer = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        self.messages.append({"role": "assistant", "content": answer})
        return answer


def fork_of(run: mockllm.Run, session: str, parent: Agent, parent_id: str) -> Agent:
    return Agent(run, session, parent.messages, **{"x-mockllm-parent": parent_id, "x-mockllm-fork": "true"})


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def turns_end(path: Path, turns: int) -> int:
    """How many logical events of an unpacked log come before the end of its `turns`-th turn, included."""
    types = [json.loads(line)["type"] for line in lines(path)[1:]]
    return [k for k, t in enumerate(types) if t == "turn/end"][turns - 1] + 1


def run_the_agents(run: mockllm.Run) -> list[str]:
    """A lead of three turns, a fork of it made after two, a new helper and a fork of the helper."""
    lead = Agent(run, "lead")
    said = [lead.say("one"), lead.say("two")]
    forker = fork_of(run, "forker", lead, "lead")
    said += [forker.say("fork task"), forker.say("fork more")]
    said.append(lead.say("three"))  # the parent goes on after the fork: not in the fork's seed
    helper = Agent(run, "helper", **{"x-mockllm-parent": "lead"})
    said.append(helper.say("help"))
    said.append(fork_of(run, "helper-fork", helper, "helper").say("help fork"))
    return said


def test_new_episodes_writes_a_new_fork_with_its_parents_turns_as_its_seed(upstream, tmp_path):
    expected = ["echo: one", "echo: two", "echo: fork task", "echo: fork more", "echo: three", "echo: help",
                "echo: help fork"]
    with mockllm.Server(tmp_path, upstream=upstream.url) as server:
        with server.run("case", record_mode="once") as run:
            lead = Agent(run, "lead")
            lead.say("one")
            lead.say("two")
        with server.run("case", record_mode="new_episodes") as run:
            assert run_the_agents(run) == expected
        report = run.end()
        assert report.recording is not None and report.recording.written, report.recording
        case = tmp_path / "case"
        by_id = {json.loads(lines(p)[0])["id"]: p for p in case.glob("session*.jsonl")}
        fork_header = json.loads(lines(by_id["forker"])[0])
        assert fork_header["parentSession"] == "lead"
        seed = turns_end(by_id["lead"], 2)
        assert fork_header["seedLength"] == seed, "the lead's two turns, not the third it made after the fork"
        assert lines(by_id["forker"])[1: seed + 1] == lines(by_id["lead"])[1: seed + 1], "copied as written"
        helper_fork = json.loads(lines(by_id["helper-fork"])[0])
        assert helper_fork["parentSession"] == "helper" and helper_fork["seedLength"] == turns_end(by_id["helper"], 1)
        assert "seedLength" not in json.loads(lines(by_id["helper"])[0]), "a spawn child stays unseeded"
        suite = mockllm.load_suite(tmp_path, keep_logs=True)
        assert [str(d) for d in check_suite(suite)] == [], "mockllm check: each seed is its parent's log"
        kinds = {s.id: (s.kind, s.cut, len(s.entries)) for s in suite.scenarios["case"].sessions}
        assert kinds["forker"] == ("fork", seed, 2) and kinds["helper-fork"][0::2] == ("fork", 1)
        upstream.stop()
        with server.run("case", record_mode="none") as run:
            assert run_the_agents(run) == expected, "each fork is served its own calls, not its parent's"
            run.assert_consumed()


# -- side routes -----------------------------------------------------------------------------------

TITLE = "title-model"


def title(run: mockllm.Run, session: str = "agent") -> str | None:
    """A title call, with the session's header as a real title call carries it."""
    with openai.OpenAI(base_url=run.base_url, api_key=KEY, max_retries=0,
                       default_headers=run.headers(session)) as client:
        answer = client.chat.completions.create(model=TITLE, messages=[{"role": "user", "content": "name it"}])
        return answer.choices[0].message.content


def titled_run(run: mockllm.Run) -> list[str | None]:
    agent = Agent(run, "agent")
    return [agent.say("one"), title(run), agent.say("two")]


def test_record_modes_write_side_route_models_calls_as_the_routes_scripts(upstream, tmp_path):
    expected = ["echo: one", "echo: name it", "echo: two"]
    with mockllm.Server(tmp_path, upstream=upstream.url, side_routes=(f"{TITLE}=title.json",)) as server:
        with server.run("titled", record_mode="once") as run:
            assert titled_run(run) == expected
        recording = run.end().recording
        assert recording is not None and recording.written and "side.title-model.json" in recording.message
        folder = tmp_path / "titled"
        assert json.loads((folder / "mockllm.json").read_text())["side_routes"] == [
            {"model": TITLE, "script": "side.title-model.json"}], "declared by the scenario, as mockllm record does"
        scenario = mockllm.load_scenario(folder)
        assert [len(s.entries) for s in scenario.sessions] == [2], "the title call is no session's"
        assert [len(r.entries) for r in scenario.side_routes] == [1]
        upstream.stop()
        with server.run("titled", record_mode="none") as run:  # the server's own route for the model yields
            assert titled_run(run) == expected
            run.assert_consumed()
    manifest = json.loads((folder / "mockllm.json").read_text())
    manifest["side_routes"][0]["repeat"] = True
    (folder / "mockllm.json").write_text(json.dumps(manifest))
    with ScriptedUpstream() as again, mockllm.Server(tmp_path, upstream=again.url) as server:
        with server.run("titled", record_mode="rewrite") as run:  # no --side-route: the scenario declares it
            assert [*titled_run(run), title(run)] == [*expected, "echo: name it"]
        assert run.end().recording.written  # type: ignore[union-attr]
        assert json.loads((folder / "mockllm.json").read_text())["side_routes"] == [
            {"model": TITLE, "script": "side.title-model.json", "repeat": True}], "its route kept as declared"
        assert [len(s.entries) for s in mockllm.load_scenario(folder).sessions] == [2]
        again.stop()
        with server.run("titled") as run:
            assert [*titled_run(run), title(run), title(run)] == [*expected, "echo: name it", "echo: name it"]
            run.assert_consumed()


def test_new_episodes_continues_a_side_route_past_its_end(upstream, tmp_path):
    """The scenario's own route file is continued in place; a route from a `--side-route` file shared by
    every scenario is written as the scenario's own `side.MODEL.json` (which then wins over the flag)."""
    recordings, shared = tmp_path / "recordings", tmp_path / "shared-title.json"
    shared.write_text(json.dumps([chunks_entry(text_call("Shared title"))]))
    with mockllm.Server(recordings, upstream=upstream.url) as server, server.run("plain", record_mode="once") as run:
        Agent(run, "agent").say("one")  # no side route on this server: "plain" declares none
    # scenario -> (its route's file, its first title, the calls its replay makes)
    cases = {"titled": ("side.title-model.json", "echo: name it", ["one", TITLE, "two", TITLE]),
             "plain": (str(shared), "Shared title", ["one", TITLE, TITLE])}
    with mockllm.Server(recordings, upstream=upstream.url, side_routes=(f"{TITLE}={shared}",)) as server:
        with server.run("titled", record_mode="once") as run:  # "titled" records its own route
            assert titled_run(run) == ["echo: one", "echo: name it", "echo: two"]
        for name, (route_file, first_title, _) in cases.items():
            with server.run(name, record_mode="new_episodes") as run:
                agent = Agent(run, "agent")
                assert [agent.say("one"), title(run), title(run)] == ["echo: one", first_title, "echo: name it"]
            report = run.end()
            assert report.recording is not None and report.recording.written, report.recording
            assert [(w.session, w.live_id, w.call) for w in report.went_live] == [(route_file, f"side route {TITLE}",
                                                                                   1)]
            assert f"side route {TITLE} (side.title-model.json) from call 1 (0-based)" in report.recording.message
            folder = recordings / name
            assert json.loads((folder / "mockllm.json").read_text())["side_routes"] == [
                {"model": TITLE, "script": "side.title-model.json"}]
            scenario = mockllm.load_scenario(folder)
            assert [len(r.entries) for r in scenario.side_routes] == [2]
        assert json.loads(shared.read_text()) == [chunks_entry(text_call("Shared title"))], "a shared file is kept"
        upstream.stop()
        for name, (_, first_title, calls) in cases.items():
            with server.run(name, record_mode="none") as run:
                agent = Agent(run, "agent")
                said = [title(run) if c == TITLE else agent.say(c) for c in calls]
                titles = [t for c, t in zip(calls, said, strict=True) if c == TITLE]
                assert titles == [first_title, "echo: name it"], name
                run.assert_consumed()


def test_new_episodes_continues_a_primary_whose_sidecar_is_a_side_routes_script(upstream, tmp_path):
    """dsh's title fixture: the title model's script is `replay.override.json`, the primary has none."""
    with mockllm.Server(tmp_path, upstream=upstream.url, side_routes=(f"{TITLE}=title.json",)) as server, \
            server.run("titled", record_mode="once") as run:
        titled_run(run)
    folder = tmp_path / "titled"
    (folder / "side.title-model.json").rename(folder / "replay.override.json")
    (folder / "mockllm.json").write_text(json.dumps({"side_routes": [{"model": TITLE,
                                                                       "script": "replay.override.json"}]}))
    with mockllm.Server(tmp_path, upstream=upstream.url) as server:
        with server.run("titled", record_mode="new_episodes") as run:
            agent = Agent(run, "agent")
            assert [agent.say("one"), title(run), agent.say("two"), agent.say("three")][-1] == "echo: three"
        assert run.end().recording.written  # type: ignore[union-attr]
        assert len(json.loads((folder / "replay.override.json").read_text())) == 1, "the route's script is kept"
        upstream.stop()
        with server.run("titled") as run:
            agent = Agent(run, "agent")
            assert [agent.say("one"), title(run), agent.say("two"), agent.say("three")] == [
                "echo: one", "echo: name it", "echo: two", "echo: three"]
            run.assert_consumed()
