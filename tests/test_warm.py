"""`--warm`: which dialects every call is rendered in at start-up; the bytes served never depend on it."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from mockllm.options import ServeOptions
from mockllm.replay.catalog import Catalog, warm
from mockllm.scenario.load import load_scenario
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
