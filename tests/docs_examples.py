"""Test helper: the examples in README.md and docs/*.md, parsed by Sybil and run for real.

Which blocks run, and how (the convention is written for contributors in docs/architecture.md,
"Examples in the docs are tests"):

- ```python blocks run in order in one namespace per page, in the page's own temp folder (which
  holds a copy of the bundled `recordings/`). A block whose first line is a comment naming a file
  (`# tests/test_agent.py`) is written to that file instead; so is an ```ini or ```toml block.
- ```bash, ```shell and ```sh blocks run with `bash -euo pipefail` in the same folder, with
  `mockllm`, `python`, `python3` and `pytest` on PATH (this interpreter, this checkout). In
  ```console blocks only the `$ ` lines run; the rest is output.
- A `mockllm serve` or `mockllm record` in a shell block is started in the background on a free
  port, and stopped with SIGINT (your Ctrl-C) when the block runs its next `mockllm` command or
  ends. `127.0.0.1:8080` in the block then reaches it; before it, the page's own server.
- Addresses are substituted before a block runs: `http://127.0.0.1:8080` becomes the page's
  mockllm server (a `mockllm.Server` of the copied recordings, on a free port), and the real
  providers' base URLs become the repository's scripted stand-in provider
  (`tests/scripted_upstream.py`), so examples that "need a key" record from it.
- ```text, ```json, ```js and other blocks are shown, never run. `<!-- skip: next -->` (Sybil's
  skip directive) skips the next runnable block; a page should rarely need it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sybil import Document, Example, Sybil
from sybil.parsers.markdown import CodeBlockParser, SkipParser
from sybil.parsers.markdown.lexers import FencedCodeBlockLexer

ROOT = Path(__file__).resolve().parents[1]
LOCAL = "http://127.0.0.1:8080"
# The providers an example may name, longest first (so a base with /v1 is replaced whole).
PROVIDERS = ("https://api.openai.com/v1", "https://api.anthropic.com/v1", "https://api.anthropic.com")
# A first line naming the file the block is written to: `# tests/test_agent.py`, `# pytest.ini`.
FILE_LINE = re.compile(r"^# ([\w.\-/]+\.(?:py|ini|toml|cfg|json|yaml|yml))\s*$")
SHELLS = ("bash", "shell", "sh", "console")
WRITTEN_ONLY = ("ini", "toml")
# Languages a fence may name: what runs, what is written, and what is only shown. A fence with no
# language or another one fails tests/test_docs_examples.py, so a runnable example cannot hide
# behind a typo (```py, ```Python).
SHOWN = ("text", "json", "js", "javascript", "typescript", "html", "yaml")
LANGUAGES = ("python", *SHELLS, *WRITTEN_ONLY, *SHOWN)
SHELL_TIMEOUT = 120.0  # a block that runs a nested pytest twice takes seconds; far past it is a hang


def pages() -> list[Path]:
    """Every page whose examples run: README.md and docs/*.md, by glob (pages added later count)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass
class Place:
    """Where one page's examples run: its folder, its mockllm server, the stand-in provider."""

    folder: Path
    server_url: str
    upstream_url: str
    env: dict[str, str]

    def substitute(self, source: str, local: str) -> str:
        for provider in PROVIDERS:
            source = source.replace(provider, self.upstream_url)
        return source.replace(LOCAL, local)


def _place(example: Example) -> Place:
    place = example.namespace["__docs_place__"]
    assert isinstance(place, Place)
    return place


def _file_line(source: str) -> str | None:
    match = FILE_LINE.match(source.split("\n", 1)[0])
    return match.group(1) if match else None


def _write(place: Place, name: str, source: str) -> None:
    target = place.folder / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(source)


def run_python(example: Example) -> None:
    place = _place(example)
    source = place.substitute(str(example.parsed), place.server_url)
    name = _file_line(source)
    if name is not None:
        _write(place, name, source)
        return
    # Padded so that a traceback names the page's own line numbers.
    code = compile("\n" * example.line + source, example.path, "exec", dont_inherit=True)
    exec(code, example.namespace)


def write_file(example: Example) -> None:
    place = _place(example)
    source = place.substitute(str(example.parsed), place.server_url)
    name = _file_line(source)
    assert name is not None, f"{example.path}:{example.line}: an ini/toml block names its file on its first line"
    _write(place, name, source)


# Prepended to every shell block: `mockllm serve` and `mockllm record` run in the background on a
# free port (MOCKLLM_PORT), read from the first line they print; any later mockllm command, and
# the block's end, stop the one running with SIGINT, as Ctrl-C would, and wait for it.
PRELUDE = r"""
__docs_bg=""
__docs_stop() {
  if [ -n "$__docs_bg" ]; then
    kill -INT "$__docs_bg" 2>/dev/null || true
    wait "$__docs_bg" 2>/dev/null || true
    __docs_bg=""
  fi
}
trap __docs_stop EXIT
mockllm() {
  __docs_stop
  case " $* " in *" -h "*|*" --help "*) command mockllm "$@"; return;; esac
  case "${1:-}" in
    serve|record)
      local fifo line fd
      fifo=$(mktemp -u); mkfifo "$fifo"
      command mockllm "$@" --port 0 >"$fifo" &
      __docs_bg=$!
      exec {fd}<"$fifo"
      rm -f "$fifo"
      if ! IFS= read -r -t 60 line <&"$fd"; then
        echo "docs: mockllm $1 printed no address" >&2; exec {fd}<&-; return 1
      fi
      echo "$line"
      cat <&"$fd" &
      exec {fd}<&-
      MOCKLLM_PORT=$(grep -oE ' on http://127\.0\.0\.1:[0-9]+' <<<"$line" | tail -1 | cut -d: -f3)
      ;;
    *) command mockllm "$@";;
  esac
}
"""


def run_shell(example: Example) -> None:
    place = _place(example)
    language = example.region.lexemes["arguments"]
    source = str(example.parsed)
    if language == "console":
        source = "\n".join(line[2:] for line in source.splitlines() if line.startswith("$ ")) + "\n"
    script = PRELUDE + place.substitute(source, "http://127.0.0.1:${MOCKLLM_PORT}")
    # A session of its own, so that a block that hangs can be ended whole, by its group's id.
    process = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=place.folder, env=place.env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=SHELL_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        raise AssertionError(f"{example.path}:{example.line}: the block did not finish in {SHELL_TIMEOUT} s:\n"
                             f"{output}") from None
    print(f"--- {example.path}:{example.line}\n{output}")  # pytest shows it when a later step fails
    if process.returncode != 0:
        raise AssertionError(f"{example.path}:{example.line}: the block exited {process.returncode}:\n{output}")


SYBIL = Sybil(parsers=[
    CodeBlockParser("python", run_python),
    *(CodeBlockParser(language, run_shell) for language in SHELLS),
    *(CodeBlockParser(language, write_file) for language in WRITTEN_ONLY),
    SkipParser(),
])


def fence_languages(page: Path) -> Iterator[tuple[int, str]]:
    """Each fenced block's line and language (as its fence names it), read by Sybil's own lexer."""
    document = Document(page.read_text(encoding="utf-8"), str(page))
    lexer = FencedCodeBlockLexer(language=r"[^\n]*", mapping={"language": "arguments", "source": "source"})
    for region in lexer(document):
        yield document.text.count("\n", 0, region.start) + 1, str(region.lexemes["arguments"]).strip()


def bin_folder(folder: Path) -> Path:
    """`mockllm`, `python`, `python3` and `pytest` as this interpreter runs them."""
    folder.mkdir()
    commands = {"mockllm": "-m mockllm", "python": "", "python3": "", "pytest": "-m pytest"}
    for name, args in commands.items():
        path = folder / name
        path.write_text(f'#!/bin/sh\nexec "{sys.executable}" {args} "$@"\n')
        path.chmod(0o755)
    return folder


def example_env(bin_dir: Path, port: int) -> dict[str, str]:
    """The environment shell blocks run in: this checkout first, no CI, no pytest-xdist worker,
    no provider address or dsh tree from the outside, and a stand-in key (examples say
    `$OPENAI_API_KEY`; the stand-in provider accepts any)."""
    dropped = ("CI", "PYTHONPATH", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")
    env = {k: v for k, v in os.environ.items()
           if k not in dropped and not k.startswith(("PYTEST_", "DSH_SNAPSHOT_"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(ROOT),
               MOCKLLM_PORT=str(port), OPENAI_API_KEY="sk-docs-example", ANTHROPIC_API_KEY="sk-docs-example",
               PYTHONDONTWRITEBYTECODE="1",
               # A `pytest` in an example loads mockllm's plugin only: the machine's other plugins
               # (langsmith, hypothesis...) cost seconds per start, and examples need none of them.
               PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTEST_PLUGINS="mockllm.pytest_plugin")
    return env


def evaluate(page: Path, place: Place) -> dict[str, Any]:
    """Run every example of `page` in order; the namespace its Python blocks shared."""
    document = SYBIL.parse(page)
    document.namespace["__docs_place__"] = place
    for example in document:
        example.evaluate()
    return document.namespace


def copy_recordings(folder: Path) -> Path:
    target = folder / "recordings"
    shutil.copytree(ROOT / "recordings", target)
    return target
