"""The package installs anywhere: a wheel built from the sources serves its bundled recordings
from any folder, and the test suite runs from any folder.

The wheel is installed non-editable into a fresh venv that sees only the wheel and mockllm's
dependencies (a .pth file naming where this interpreter has them): no source checkout, no other
mockllm, no network. Building it is the slow part (~3 s, pip's cache and find-links reused).
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import sys
import tomllib
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import msgspec
import openai
import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "mockllm", "recordings")
START_TIMEOUT = 30.0  # a cold interpreter loading every bundled scenario; far past it is a hang


def clean_env() -> dict[str, str]:
    """The environment without anything that would point a child at this checkout or a dsh tree."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("DSH_SNAPSHOT_")}


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        return next((self.venv / "lib").glob("python3*/site-packages"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    if sys.platform == "win32":
        pytest.skip("the venv layout below is POSIX's")
    # A copy, as a fresh clone would be: building writes build/ and *.egg-info into the source folder.
    src = tmp_path_factory.mktemp("clone")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)],
                   check=True, capture_output=True, env=clean_env())
    (wheel,) = dist.glob("*.whl")
    env = tmp_path_factory.mktemp("venv") / "v"
    venv.create(env, with_pip=False)  # this interpreter's pip installs into it: faster than ensurepip
    result = Installed(wheel, env)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(result.python), "install", "--no-deps",
                    "--no-index", "-q", str(wheel)], check=True, capture_output=True, env=clean_env())
    # The dependencies, from where this interpreter has them. A .pth line adds a folder to
    # sys.path without running the .pth files in it, so no editable mockllm comes along.
    # pytest and openai too, for the throw-away test project below.
    deps = sorted({str(Path(m.__file__ or "").parent.parent) for m in (aiohttp, msgspec, openai, pytest)})
    (result.site_packages / "mockllm-test-deps.pth").write_text("\n".join(deps) + "\n")
    return result


def test_wheel_holds_every_module_the_typing_marker_and_every_recording(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "mockllm").rglob("*.py")}
    recordings = {"mockllm/recordings/" + p.relative_to(ROOT / "recordings").as_posix()
                  for p in (ROOT / "recordings").rglob("*") if p.is_file()}
    # The inspector's stylesheet and scripts: package data its pages inline when served.
    assets = {p.relative_to(ROOT).as_posix() for p in (ROOT / "mockllm" / "inspector" / "assets").iterdir()}
    assert modules | recordings | assets | {"mockllm/py.typed"} <= names, "add the missing package to pyproject.toml"
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "mockllm = mockllm.cli.main:main" in zipfile.ZipFile(installed.wheel).read(entry_points).decode()


def test_package_list_names_every_sub_package() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {p.parent.relative_to(ROOT).as_posix().replace("/", ".") for p in (ROOT / "mockllm").rglob("__init__.py")}
    assert found <= listed


@dataclass
class Serving:
    url: str
    first_line: str


def read_line(process: subprocess.Popen[str], timeout: float) -> str:
    """The process's next stdout line, or a failure carrying its stderr when it exits or stalls."""
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            process.kill()
            pytest.fail(f"no output within {timeout} s: {process.communicate()[1]}")
    line = process.stdout.readline()
    if not line:
        pytest.fail(f"exited {process.wait()} before serving: {process.communicate()[1]}")
    return line


@pytest.fixture(params=["console-script", "python-m"])
def serving(request: pytest.FixtureRequest, installed: Installed) -> Iterator[Serving]:
    """`mockllm serve --port 0` run from `/` with the installed wheel, stopped with SIGTERM after."""
    command = ([str(installed.venv / "bin" / "mockllm")] if request.param == "console-script"
               else [str(installed.python), "-m", "mockllm"])
    process = subprocess.Popen([*command, "serve", "--port", "0"], cwd="/", env=clean_env(), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = read_line(process, START_TIMEOUT)
        url = line.rsplit(" on ", 1)[-1].strip()
        assert url.startswith("http://127.0.0.1:"), line
        yield Serving(url, line)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=START_TIMEOUT)
        assert process.returncode == 0, err
        assert out.rstrip().endswith("mockllm stopped")
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_installed_wheel_serves_its_bundled_recordings_from_root(installed: Installed, serving: Serving) -> None:
    assert f" from {installed.site_packages / 'mockllm' / 'recordings'} on " in serving.first_line
    with openai.OpenAI(base_url=f"{serving.url}/scenarios/text-turn/v1", api_key="unused", max_retries=0) as client:
        assert [m.id for m in client.models.list()]
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "Hello from the recorded model!"


def test_installed_package_is_the_wheel_not_a_checkout(installed: Installed) -> None:
    code = ("import mockllm, mockllm.server.running; print(mockllm.__file__); "
            "print(mockllm.server.running.bundled_recordings())")
    out = subprocess.run([str(installed.python), "-c", code], cwd="/", env=clean_env(), check=True,
                         capture_output=True, text=True).stdout.split()
    assert [Path(p).is_relative_to(installed.site_packages) for p in out] == [True, True]


def test_suite_runs_without_the_project_folder_on_sys_path(tmp_path: Path) -> None:
    """`pytest` (unlike `python -m pytest`) does not put the current folder on sys.path; collecting
    from another folder must still import every test module and its helpers."""
    # -n 0: collecting needs no workers (the project's addopts start one per core).
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p",
                             "no:cacheprovider", str(ROOT / "tests")], cwd=tmp_path, env=clean_env(),
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "error" not in result.stdout.lower().splitlines()[-1]


THROWAWAY_TESTS = """
import openai
import pytest

import mockllm

USER = [{"role": "user", "content": "go"}]

def call(run, session="agent"):
    with openai.OpenAI(base_url=run.base_url, api_key="x", max_retries=0, default_headers=run.headers(session)) as c:
        return c.chat.completions.create(model="m", messages=USER)

def test_installed_not_a_checkout():
    assert "/site-packages/mockllm/" in mockllm.__file__

@pytest.mark.mockllm("tool-loop")
def test_tool_loop_complete(mockllm_run):
    assert [call(mockllm_run).choices[0].finish_reason for _ in range(5)][-1] == "stop"

@pytest.mark.mockllm("fork-child")
def test_fork_tree(mockllm_run):
    call(mockllm_run, "parent"), call(mockllm_run, "parent")
    assert call(mockllm_run, "child").choices[0].message.content == "TANGERINE"
    call(mockllm_run, "parent")

@pytest.mark.mockllm("tool-loop")
def test_unconsumed(mockllm_run):
    call(mockllm_run)

@pytest.mark.mockllm("tool-loop", consume=False)
def test_consume_false(mockllm_run):
    call(mockllm_run)
    assert mockllm_run.report().sessions[0].served == 1

@pytest.mark.mockllm("text-turn")
def test_past_the_end(mockllm_run):
    call(mockllm_run)
    with pytest.raises(openai.APIStatusError) as caught:
        call(mockllm_run)
    assert caught.value.status_code == 410
"""


def test_a_throwaway_project_uses_the_installed_plugin(installed: Installed, tmp_path: Path) -> None:
    """A project that only installs mockllm and sets mockllm_recordings: complete runs pass, the
    unconsumed run and the call past the end fail at teardown, each naming what happened."""
    for name in ("tool-loop", "fork-child", "text-turn"):
        shutil.copytree(ROOT / "recordings" / name, tmp_path / "trees" / name)
    # A stand-in prompt ("go"): divergences are reported, not failed.
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nmockllm_recordings = trees\nmockllm_divergence = warn\naddopts = --strict-markers\n")
    (tmp_path / "test_agent.py").write_text(THROWAWAY_TESTS)
    result = subprocess.run([str(installed.python), "-m", "pytest", "-p", "no:asyncio", "-p", "no:cacheprovider"],
                            cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=120)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert out.splitlines()[-1].startswith("=") and "6 passed, 2 errors" in out.splitlines()[-1], out
    assert "ERROR at teardown of test_unconsumed" in out and "ERROR at teardown of test_past_the_end" in out
    # Each failure leaves its report, rendered with the inspector's assets from the installed package.
    reports = sorted((tmp_path / ".pytest_cache" / "mockllm").glob("*.html"))
    assert [r.name for r in reports] == ["test_agent.py__test_past_the_end.html", "test_agent.py__test_unconsumed.html"]
    assert f"mockllm report: {reports[1]}" in out and ".lane-head" in reports[1].read_text()
    assert "calls 1-4 (0-based) of 5 not requested" in out
    assert "failure script_exhausted in session session.jsonl (live id agent), call 1 (0-based)" in out
