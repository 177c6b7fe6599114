"""Record modes from Python, without pytest: `mockllm.Server(path, upstream=..., record_mode="once")`
records a run's scenario on first use and replays it after, in a later server too; so does
`mockllm.AsyncServer`."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

import mockllm
from tests.scripted_upstream import ScriptedUpstream

QUESTION = [{"role": "user", "content": "what is the plan?"}]


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as up:
        yield up


def test_a_server_records_on_first_use_and_a_later_one_replays_with_the_upstream_gone(upstream, tmp_path):
    recordings = tmp_path / "recordings"
    with mockllm.Server(recordings, upstream=upstream.url, record_mode="once") as srv:
        assert srv.scenarios == []
        with srv.run("my-case") as run:
            client = openai.OpenAI(base_url=run.base_url, api_key="sk-mine", max_retries=0)
            with client:
                answer = client.chat.completions.create(model="m", messages=QUESTION)  # type: ignore[arg-type]
            assert answer.choices[0].message.content == "echo: what is the plan?"
        assert run.end().recording.written  # type: ignore[union-attr]
        assert srv.scenarios == ["my-case"], "recorded: served from now on"
    upstream.stop()
    with mockllm.Server(recordings, upstream=upstream.url, record_mode="once") as srv, srv.run("my-case") as run:
        with openai.OpenAI(base_url=run.base_url, api_key="sk-other", max_retries=0) as client:
            answer = client.chat.completions.create(model="m", messages=QUESTION)  # type: ignore[arg-type]
        assert answer.choices[0].message.content == "echo: what is the plan?"
        run.assert_consumed()
    assert run.end().recording is None, "once replays a scenario that has a recording"


async def test_an_async_server_records_and_replays_alike(upstream, tmp_path):
    async with mockllm.AsyncServer(tmp_path, upstream=upstream.url, record_mode="once") as srv:
        for _ in range(2):  # recorded, then replayed
            async with await srv.run("async-case") as run, \
                    openai.AsyncOpenAI(base_url=run.base_url, api_key="k", max_retries=0) as client:
                stream = await client.chat.completions.create(model="m", messages=QUESTION,  # type: ignore[arg-type]
                                                              stream=True)
                assert "".join([c.choices[0].delta.content or "" async for c in stream]) == "echo: what is the plan?"
        assert (await run.end()).recording is None
    assert len(upstream.received) == 1


def test_a_missing_folder_without_a_record_mode_still_fails_to_start(tmp_path):
    with pytest.raises(mockllm.MockllmError, match="not a folder"):
        mockllm.Server(tmp_path / "nowhere").start()
