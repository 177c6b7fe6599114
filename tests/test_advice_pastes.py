"""Advice that names a command gives one that works when pasted into a shell (issue 29), and
every `--help` names the reference page that says more.

The commands are taken from the error messages as a user would copy them and run with bash,
`mockllm` on PATH as this checkout's.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import openai
import pytest

import mockllm
from mockllm.cli.main import _parser
from mockllm.dsh.header import HeaderError, parse_header
from mockllm.pytest_plugin import _invoked_path
from tests.docs_examples import ROOT, bin_folder
from tests.logbuilder import text_call, write_sessions
from tests.scripted_upstream import ScriptedUpstream

pytest_plugins = ["pytester"]


@pytest.fixture
def shell_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_SNAPSHOT_")}
    env["PATH"] = f"{bin_folder(tmp_path / 'bin')}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = str(ROOT)
    return env


async def pasted(command: str, env: dict[str, str]) -> str:
    """Run `command` as pasted into bash (without blocking the loop the server runs on)."""
    process = await asyncio.create_subprocess_exec("bash", "-c", command, env=env, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, f"{command!r} exited {process.returncode}: {err.decode()}"
    return out.decode()


async def test_a_spent_default_runs_advice_pastes_and_starts_over(serve, tmp_path, shell_env):
    folder = write_sessions(tmp_path / "chat", {"p": [text_call("first answer")]})
    server = await serve(folder)
    base = f"{server.base_url}/scenarios/chat/v1"
    ask = [{"role": "user", "content": "q"}]
    async with openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=0,
                                  default_headers={"x-mockllm-session": "p"}) as client:
        await client.chat.completions.create(model="m", messages=ask)
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model="m", messages=ask)
        message = caught.value.message
        new_run = re.search(r"give each test its own run with (curl .+?)\. If", message)
        start_over = re.search(r"start over with (curl .+?) \(the next request", message)
        assert new_run and start_over, message
        created = json.loads(await pasted(new_run.group(1), shell_env))
        assert created["base_url"].startswith(server.base_url + "/runs/")
        await pasted(start_over.group(1), shell_env)
        again = await client.chat.completions.create(model="m", messages=ask)  # a fresh default run
    assert again.choices[0].message.content == "first answer"


async def test_an_unknown_scenarios_advice_records_it_when_pasted(tmp_path, shell_env):
    (tmp_path / "recordings").mkdir()
    with ScriptedUpstream() as upstream:
        server = mockllm.AsyncServer(tmp_path / "recordings", upstream=upstream.url)
        async with server:
            with pytest.raises(mockllm.AdminError) as refused:
                await server.run("new-case")
            found = re.search(r"else create its run with \"record_mode\": \"once\": (curl .+)$",
                              refused.value.message)
            assert found, refused.value.message
            created = json.loads(await pasted(found.group(1), shell_env))
            assert created["run"]


async def test_a_server_with_no_upstream_advises_a_serve_command_that_starts(tmp_path, shell_env):
    (tmp_path / "recordings").mkdir()
    async with mockllm.AsyncServer(tmp_path / "recordings", record_mode="once") as server:
        with pytest.raises(mockllm.AdminError) as refused:
            await server.run("new-case")
    found = re.search(r"start the server with one, (mockllm serve .+?) \(mockllm\.Server", refused.value.message)
    assert found, refused.value.message
    assert "stands for your provider's base URL" in refused.value.message
    # Pasted, it serves (on a free port here: 8080 may be taken on a shared machine), and stops on Ctrl-C.
    process = await asyncio.create_subprocess_exec("bash", "-c", f"exec {found.group(1)} --port 0", env=shell_env,
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        assert process.stdout is not None
        first = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        assert "on http://127.0.0.1:" in first, first + (await process.stderr.read()).decode()  # type: ignore[union-attr]
        banner = [first]
        while "record mode" not in banner[-1] and banner[-1]:
            banner.append((await asyncio.wait_for(process.stdout.readline(), 30)).decode())
        assert "record mode once" in banner[-1], banner
    finally:
        process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.wait(), 30)


def test_the_plugins_command_names_the_test_from_where_pytest_was_started(tmp_path):
    config = SimpleNamespace(rootpath=tmp_path, invocation_params=SimpleNamespace(dir=tmp_path / "tests"))
    assert _invoked_path(config, "tests/test_a.py::TestX::test_y[a b]") == "test_a.py::TestX::test_y[a b]"
    config.invocation_params.dir = tmp_path
    assert _invoked_path(config, "tests/test_a.py::test_y") == "tests/test_a.py::test_y"
    # Quoted as a whole, a parametrized id pastes as one argument.
    assert shlex.split(shlex.join(["pytest", "t.py::test[a b]"])) == ["pytest", "t.py::test[a b]"]


def test_the_upgrade_advice_names_the_distribution_pip_installs():
    with pytest.raises(HeaderError) as caught:
        parse_header(b'{"type": "session", "version": 1, "id": "x", "createdAt": 1}')
    name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    assert f"pip install --upgrade {name}" in str(caught.value)


def test_every_help_names_a_page_of_the_docs_that_exists():
    parser = _parser()
    helps = {"mockllm": parser.format_help()}
    verbs = next(a for a in parser._actions if a.dest == "verb")
    helps |= {name: verb.format_help() for name, verb in verbs.choices.items()}  # type: ignore[union-attr]
    for name, text in helps.items():
        found = re.search(r"More: (docs/[\w.-]+\.md)", text.replace("\n", " "))
        assert found, f"mockllm {name} --help names no docs page"
        assert (ROOT / found.group(1)).is_file(), f"mockllm {name} --help names {found.group(1)}, which is missing"


def test_help_is_what_the_installed_command_prints(shell_env):
    out = subprocess.run([sys.executable, "-m", "mockllm", "record", "--help"], capture_output=True, text=True,
                         env=shell_env, check=True).stdout
    assert "docs/record.md" in out


PLUGIN_TEST = '''
import pytest
from openai import OpenAI


@pytest.mark.mockllm()
def test_greeting(mockllm_run):
    client = OpenAI(base_url=mockllm_run.base_url, api_key="unused")
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "echo: hi"
'''


def test_the_plugins_advice_records_the_test_when_pasted(pytester: pytest.Pytester, shell_env, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    pytester.makeini("[pytest]\naddopts = -p no:asyncio -p no:cacheprovider\n")
    pytester.mkdir("tests").joinpath("test_agent.py").write_text(PLUGIN_TEST)
    with ScriptedUpstream() as upstream:
        # No recording yet, record mode none: the test fails, naming the command; the upstream was
        # given as a flag, which the pasted command must repeat.
        result = pytester.runpytest("tests", f"--mockllm-upstream={upstream.url}")
        result.assert_outcomes(errors=1)
        found = re.search(r"record this test again: (pytest \S+ .*)$", result.stdout.str(), re.MULTILINE)
        assert found, result.stdout.str()
        command = found.group(1)
        assert f"--mockllm-upstream {upstream.url}" in command
        env = {k: v for k, v in shell_env.items() if k != "CI" and not k.startswith("PYTEST_")}
        env.update(PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTEST_PLUGINS="mockllm.pytest_plugin")
        pasted_run = subprocess.run(["bash", "-c", command], cwd=pytester.path, env=env, capture_output=True,
                                    text=True, timeout=120)
    assert pasted_run.returncode == 0, pasted_run.stdout + pasted_run.stderr
    assert (pytester.path / "recordings" / "test_agent" / "test_greeting" / "session.jsonl").is_file()
    pytester.runpytest("tests").assert_outcomes(passed=1)  # and it replays, offline
