"""Errors that say what to do: the closest conversation, a spent default run, the endpoints of a base."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from tests.conftest import http
from tests.logbuilder import text_call, write_sessions


def client(base_url: str, headers: dict[str, str] | None = None) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, default_headers=headers or {})


@pytest.fixture
def one_session(tmp_path: Path) -> Path:
    return write_sessions(tmp_path / "chat", {"p": [text_call("first answer"), text_call("second answer")]})


async def test_a_second_turn_sent_without_its_history_names_the_closest_conversation(serve, one_session):
    server = await serve(one_session)
    base = f"{server.base_url}/scenarios/chat/v1"
    system = {"role": "system", "content": "sys"}
    async with client(base) as c:
        await c.chat.completions.create(model="m", messages=[system, {"role": "user", "content": "hello"}])
        with pytest.raises(openai.NotFoundError) as caught:  # the second turn forgot the first
            await c.chat.completions.create(model="m", messages=[system, {"role": "user", "content": "and now?"}])
    message = caught.value.message
    assert caught.value.body["code"] == "unrecorded_session"
    assert "the closest is conversation-1 (session.jsonl)" in message
    assert "agrees with it for 1 message(s) and then differs at message 2" in message
    assert "there it had user message 'hello', this request has user message 'and now?'" in message
    assert "a turn sent without the history before it" in message


async def test_a_spent_default_run_says_how_to_start_over(serve, one_session):
    server = await serve(one_session)
    base = f"{server.base_url}/scenarios/chat/v1"
    async with client(base, {"x-mockllm-session": "p"}) as c:
        for _ in range(2):
            await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
        with pytest.raises(openai.APIStatusError) as caught:
            await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    status, listed = await http("GET", f"{server.base_url}/_mockllm/scenarios")
    assert status == 200 and isinstance(listed, dict)
    [scenario] = listed["scenarios"]
    run = scenario["default_run"]
    assert run is not None
    assert caught.value.status_code == 410
    assert (f"This is scenario chat's default run, and it is spent: start over with curl -X DELETE "
            f"{server.base_url}/_mockllm/runs/{run}" in caught.value.message)
    # And it does start over.
    assert (await http("DELETE", f"{server.base_url}/_mockllm/runs/{run}"))[0] == 200
    async with client(base, {"x-mockllm-session": "p"}) as c:
        again = await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert again.choices[0].message.content == "first answer"


async def test_openai_agents_default_responses_path_is_served_and_others_named(serve, one_session):
    server = await serve(one_session)
    base = f"{server.base_url}/scenarios/chat/v1"
    async with client(base, {"x-mockllm-session": "p"}) as c:
        response = await c.responses.create(model="m", input="q")
        assert response.output_text == "first answer"
        with pytest.raises(openai.NotFoundError) as caught:
            await c.moderations.create(model="m", input="q")  # (embeddings are served: test_embeddings.py)
    assert ("under /scenarios/chat/v1 mockllm serves POST /scenarios/chat/v1/chat/completions, "
            "POST /scenarios/chat/v1/messages, POST /scenarios/chat/v1/responses") in caught.value.message
