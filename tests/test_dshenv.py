"""dsh's environment contract: `mockllm serve` with no PATH serves the `DSH_SNAPSHOT_*` tree at /v1."""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import openai
import pytest

import mockllm
from mockllm.scenario.dshenv import CHILD_FILES, FILE, OVERRIDE, DshEnvError, load_dsh_env, requested
from mockllm.scenario.load import load_scenario

ROOT = Path(__file__).resolve().parents[1]
RECORDINGS = ROOT / "recordings"
USER = [{"role": "user", "content": "go"}]


def scattered(tmp_path: Path, scenario: str) -> dict[str, str]:
    """A recorded tree spread as dsh may hold it: the primary under its own name in one folder,
    each child in a folder of its own, children listed in reverse file order."""
    source = RECORDINGS / scenario
    (tmp_path / "tree").mkdir()
    primary = shutil.copy(source / "session.jsonl", tmp_path / "tree" / "snapshot.jsonl")
    children = []
    for number, child in enumerate(sorted(source.glob("session.*.jsonl"), reverse=True)):
        folder = tmp_path / f"children-{number}"
        folder.mkdir()
        children.append(shutil.copy(child, folder / child.name))
    env = {FILE: str(primary), CHILD_FILES: os.pathsep.join(str(c) for c in children)}
    if (source / "replay.override.json").is_file():
        (tmp_path / "sidecars").mkdir()
        env[OVERRIDE] = str(shutil.copy(source / "replay.override.json", tmp_path / "sidecars" / "override.json"))
    return env


def shape(scenario: mockllm.Scenario) -> list[tuple[str, str, int, int]]:
    return [(s.id, s.kind, s.cut, len(s.entries)) for s in scenario.sessions]


@pytest.mark.parametrize("name", ["mixed-tree", "fork-child", "throw-sidecar"])
def test_the_env_tree_loads_as_its_folder_does(tmp_path: Path, name: str) -> None:
    suite = load_dsh_env(scattered(tmp_path, name))
    (scenario,) = suite.scenarios.values()
    assert scenario.name == "tree"
    assert shape(scenario) == shape(load_scenario(RECORDINGS / name))


def test_children_listed_out_of_order_are_ordered_by_creation(tmp_path: Path) -> None:
    env = scattered(tmp_path, "mixed-tree")
    assert [Path(p).name for p in env[CHILD_FILES].split(os.pathsep)] == ["session.2.jsonl", "session.1.jsonl"]
    sessions = load_dsh_env({**env, CHILD_FILES: os.pathsep.join(reversed(env[CHILD_FILES].split(os.pathsep)))})
    ordered = next(iter(sessions.scenarios.values())).sessions
    # session.2 (a fork) was created before session.1 (a spawn), whatever the list says.
    assert [(Path(s.file).name, s.kind) for s in ordered] == [
        ("snapshot.jsonl", "primary"), ("session.2.jsonl", "fork"), ("session.1.jsonl", "spawn")]
    assert ordered[1].file == str(Path(env[CHILD_FILES].split(os.pathsep)[0]).resolve())  # another folder: its path


def test_the_env_tree_is_served_at_v1_and_routes_its_children(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in scattered(tmp_path, "fork-child").items():
        monkeypatch.setenv(key, value)
    with mockllm.Server() as server:
        bare = f"{server.url}/v1"

        def ask(session: str) -> str | None:
            with openai.OpenAI(base_url=bare, api_key="x", max_retries=0,
                               default_headers={"x-mockllm-session": session}) as c:
                return c.chat.completions.create(model="m", messages=USER).choices[0].message.content  # type: ignore[arg-type]

        assert ask("parent") == "OK"
        ask("parent")
        assert ask("child") == "TANGERINE"
        assert ask("parent") == "PARENT_DONE"
    with mockllm.Server(RECORDINGS / "text-turn") as server:  # a PATH given wins over the environment
        assert server.scenarios == ["text-turn"]


@pytest.mark.parametrize(("break_it", "expected"), [
    pytest.param(lambda env: {**env, FILE: env[FILE] + ".gone"}, f"{FILE}: */snapshot.jsonl.gone: no such file",
                 id="missing-primary"),
    pytest.param(lambda env: {**env, CHILD_FILES: env[CHILD_FILES] + os.pathsep + "/nowhere/session.9.jsonl"},
                 f"{CHILD_FILES}: /nowhere/session.9.jsonl: no such file", id="missing-child"),
    pytest.param(lambda env: {**env, OVERRIDE: "/nowhere/override.json"},
                 f"{OVERRIDE}: /nowhere/override.json: no such file", id="missing-override"),
    pytest.param(lambda env: {**env, CHILD_FILES: env[CHILD_FILES] + os.pathsep + env[FILE]},
                 f"{CHILD_FILES}: */snapshot.jsonl: listed twice*", id="listed-twice"),
    pytest.param(lambda env: {**env, CHILD_FILES: _broken(env, "child.jsonl", "not json\n")},
                 f"{CHILD_FILES}: */child.jsonl:1: malformed JSON*", id="broken-child"),
    pytest.param(lambda env: {**env, OVERRIDE: _broken(env, "override.json", "{\"patches\": 3}")},
                 f"{OVERRIDE}: */override.json*", id="broken-override"),
])
def test_a_missing_or_broken_file_names_the_variable_and_the_file(tmp_path: Path, break_it: object,
                                                                  expected: str) -> None:
    env = break_it(scattered(tmp_path, "fork-child"))  # type: ignore[operator]
    with pytest.raises(DshEnvError) as caught:
        load_dsh_env(env)
    assert any(_match(line, expected) for line in str(caught.value).splitlines()), str(caught.value)


def _broken(env: dict[str, str], name: str, text: str) -> str:
    path = Path(env[FILE]).parent / name
    path.write_text(text)
    return os.pathsep.join([*filter(None, env.get(CHILD_FILES, "").split(os.pathsep)), str(path)]) \
        if name.endswith(".jsonl") else str(path)


def _match(line: str, pattern: str) -> bool:
    import fnmatch

    return fnmatch.fnmatchcase(line, pattern)


def test_only_a_non_empty_dsh_snapshot_file_asks_for_the_env_tree() -> None:
    assert requested({FILE: "/x"}) and not requested({FILE: ""}) and not requested({CHILD_FILES: "/x"})


def read_lines(process: subprocess.Popen[bytes], count: int, timeout: float = 30) -> list[str]:
    """The first `count` stdout lines, read straight from the pipe (a buffered reader would hide
    what it holds from select); fails with stderr when the process exits or stalls first."""
    assert process.stdout is not None
    out = b""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while out.count(b"\n") < count:
            chunk = os.read(process.stdout.fileno(), 4096) if selector.select(timeout) else b""
            if not chunk:
                process.kill()
                pytest.fail(f"mockllm serve printed {out!r}, then: {process.communicate()[1].decode()}")
            out += chunk
    return out.decode().splitlines()[:count]


def test_mockllm_serve_with_no_path_serves_the_env_tree(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_SNAPSHOT_")}
    env.update(scattered(tmp_path, "mixed-tree"))
    process = subprocess.Popen([sys.executable, "-m", "mockllm", "serve", "--port", "0"], env=env, cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        lines = read_lines(process, 2)
        assert lines[0].startswith("mockllm serving 1 scenario(s) from "), lines
        root = lines[1].strip()
        assert root.endswith("/v1")
        with openai.OpenAI(base_url=root, api_key="x", max_retries=0) as client:
            assert client.models.list().data
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


def test_mockllm_serve_reports_a_broken_env_tree_and_exits(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_SNAPSHOT_")}
    env[FILE] = str(tmp_path / "missing.jsonl")
    result = subprocess.run([sys.executable, "-m", "mockllm", "serve", "--port", "0"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr == f"mockllm: {FILE}: {tmp_path / 'missing.jsonl'}: no such file\n"
