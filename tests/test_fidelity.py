"""The fast paths produce exactly what the slow paths do.

Loading decodes a log's body in one call and falls back to line-by-line decoding only to name a
broken line; serving writes a reply's pre-joined stream in one write instead of one per event.
Both shortcuts must be invisible: same events, same bytes.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from mockllm.dsh.reader import parse_log
from mockllm.replay.catalog import Catalog
from mockllm.scenario.load import load_scenario
from mockllm.wire import CHAT
from mockllm.wire.chat.dialect import DONE
from tests.logbuilder import CORPUS, RECORDINGS

LOGS = sorted(RECORDINGS.glob("*/session*.jsonl"))
if CORPUS.is_dir():
    LOGS += sorted(CORPUS.glob("*/*/session*.jsonl"))


def _plain(events):
    return [(e.type, e.seq, e.time, e.data) for e in events]


@pytest.mark.parametrize("path", LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_one_call_decoding_equals_line_by_line(path: Path) -> None:
    buf = path.read_bytes()
    fast = parse_log(buf, path)
    # A blank line after every line forces the line-by-line path (and doubles the line numbers).
    slow = parse_log(buf.replace(b"\n", b"\n\n"), path)
    assert _plain(fast.events) == _plain(slow.events)
    assert [2 * e.line - 1 for e in fast.events] == [e.line for e in slow.events]


@pytest.mark.parametrize("name", ["tool-loop", "mixed-tree", "empty-block"])
async def test_the_two_write_stream_is_the_per_event_frames(serve, name: str) -> None:
    scenario = load_scenario(RECORDINGS / name)
    catalog = Catalog(scenario)
    server = await serve(RECORDINGS / name)
    async with aiohttp.ClientSession() as http:
        for script, session in enumerate(scenario.sessions):
            for call in range(len(session.entries)):
                reply = catalog.reply(CHAT, script, call, None, None)
                expected = b"".join(reply.frames) + (reply.usage_frame or b"") + DONE
                async with http.post(
                    f"{server.base_url}/scenarios/{name}/v1/chat/completions",
                    json={"messages": [{"role": "user", "content": "q"}], "stream": True,
                          "stream_options": {"include_usage": True}},
                    headers={"x-mockllm-session": session.id},
                ) as response:
                    assert response.status == 200
                    assert await response.read() == expected
