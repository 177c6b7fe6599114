"""A tool call recorded cut mid-arguments (max tokens stopped the model while it wrote them), replayed
to the official Gemini and Ollama clients, whose wires carry arguments as an object only.

Both clients refuse arguments that are not an object (google-genai: `functionCall.args Input should
be a valid dictionary`); the call goes out with `{}` and the run's report notes it. The chat
completions wire carries argument text, so there it stays exactly as recorded, with no notice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from tests import gemini_client, ollama_client
from tests.conftest import new_run, run_state
from tests.logbuilder import finish, text_call, tool_call, write_sessions

CUT = '{"path": "/srv/app/notes.md", "content": "Oslo is col'


def _cut_tree(folder: Path) -> Path:
    """A primary whose first call writes a file and is cut mid-arguments, then answers in text."""
    cut = [c for c in tool_call("write_file", CUT, "call_cut") if c["type"] != "finish"] + [finish("max-tokens")]
    return write_sessions(folder, {"p": [cut, text_call("done")]})


@pytest.fixture(autouse=True)
async def close_clients() -> Any:
    yield
    await gemini_client.close_all()
    await ollama_client.close_all()


async def _notices(base_url: str, run: str) -> list[dict[str, Any]]:
    return [n for n in (await run_state(base_url, run))["notices"] if n["kind"] == "cut_tool_call"]


@pytest.mark.parametrize("mode", ["stream", "whole"])
async def test_gemini_reads_a_cut_tool_call_as_empty_args_with_a_notice(serve, tmp_path, mode):
    server = await serve(_cut_tree(tmp_path / "cut"))
    run, base = await new_run(server.base_url, "cut")
    sdk = gemini_client.client(gemini_client.root(base))
    ask = gemini_client.generate_stream if mode == "stream" else gemini_client.generate
    received = await ask(sdk, "task of p")
    assert received["tool_calls"] == [{"id": "call_cut", "name": "write_file", "args": {}}]
    assert received["finish"] == "MAX_TOKENS"
    [notice] = await _notices(server.base_url, run)
    assert (notice["session"], notice["call"]) == ("session.jsonl", 0)
    assert "write_file" in notice["message"] and "cut mid-arguments" in notice["message"]


@pytest.mark.parametrize("mode", ["stream", "whole"])
async def test_ollama_reads_a_cut_tool_call_as_empty_arguments_with_a_notice(serve, tmp_path, mode):
    server = await serve(_cut_tree(tmp_path / "cut"))
    run, base = await new_run(server.base_url, "cut")
    sdk = ollama_client.client(ollama_client.root(base))
    ask = ollama_client.chat_stream if mode == "stream" else ollama_client.chat_whole
    received = await ask(sdk, [{"role": "user", "content": "task of p"}])
    assert received["tool_calls"] == [{"name": "write_file", "arguments": {}}]
    assert received["done_reason"] == "length"
    [notice] = await _notices(server.base_url, run)
    assert (notice["session"], notice["call"]) == ("session.jsonl", 0)


async def test_chat_completions_keeps_the_cut_arguments_as_recorded_and_notes_nothing(serve, tmp_path):
    server = await serve(_cut_tree(tmp_path / "cut"))
    run, base = await new_run(server.base_url, "cut")
    async with openai.AsyncOpenAI(base_url=base, api_key="x") as sdk:
        answer = await sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "task of p"}])
    [call] = answer.choices[0].message.tool_calls or []
    assert call.function.arguments == CUT
    assert answer.choices[0].finish_reason == "length"
    assert await _notices(server.base_url, run) == []
