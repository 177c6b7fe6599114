"""`--warm`: which dialects every call is rendered in at start-up; the bytes served never depend on it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from mockllm.options import DIALECT_NAMES, ServeOptions
from mockllm.replay.catalog import Catalog, warm
from mockllm.scenario.load import load_scenario
from mockllm.wire import DIALECTS
from tests.conftest import new_run

RECORDINGS = Path(__file__).resolve().parents[1] / "recordings"
SCENARIO = next(p for p in sorted(RECORDINGS.iterdir()) if (p / "session.jsonl").is_file())


@pytest.mark.parametrize(("value", "rendered"), [
    ("chat", ("chat",)),
    ("none", ()),
    ("anthropic,gemini", ("anthropic", "gemini")),
    ("all", ("chat", "anthropic", "responses", "gemini", "ollama", "bedrock")),
])
def test_start_up_renders_the_named_dialects_only(value: str, rendered: tuple[str, ...]) -> None:
    catalog = Catalog(load_scenario(SCENARIO))
    warm(catalog, ServeOptions(warm=value))
    assert sorted(catalog.rendered_in) == sorted(rendered)


@pytest.mark.parametrize("value", ["klingon", "chat,klingon", "all,chat", ""])
def test_an_unknown_dialect_is_refused_naming_the_known_ones(value: str) -> None:
    with pytest.raises(ValueError, match="expected a comma list of chat, anthropic, responses"):
        ServeOptions(warm=value)


def test_the_dialect_names_options_check_are_those_registered() -> None:
    """Kept apart so that a test process builds its options without importing every dialect."""
    assert tuple(dialect.name for dialect in DIALECTS) == DIALECT_NAMES


def test_a_test_process_builds_its_options_without_the_server_or_the_dialects() -> None:
    """What the pytest plugin and `mockllm.api` cost a test process that only talks to a server (an
    xdist worker, a controller whose server is another process): neither aiohttp nor the dialects."""
    code = ("import sys, mockllm.pytest_plugin, mockllm.api, mockllm.shared_server\n"
            "from mockllm.options import in_process\n"
            "in_process(warm='chat,anthropic', divergence='warn')\n"
            "print(sorted(m for m in sys.modules if m == 'aiohttp' or m.startswith('mockllm.wire')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


async def test_a_call_is_served_the_same_bytes_however_it_was_warmed(serve) -> None:
    bodies = []
    for value in ("chat", "none", "all"):
        server = await serve(SCENARIO, warm=value)
        _, base = await new_run(server.base_url, SCENARIO.name)
        async with aiohttp.ClientSession() as http:
            for path, body in (("/chat/completions", {"model": "m", "stream": True,
                                                      "messages": [{"role": "user", "content": "hi"}]}),):
                async with http.post(base + path, json=body, headers={"x-mockllm-session": "w"}) as response:
                    assert response.status == 200, await response.text()
                    bodies.append(await response.read())
    assert bodies[0] == bodies[1] == bodies[2] and bodies[0].endswith(b"data: [DONE]\n\n")
