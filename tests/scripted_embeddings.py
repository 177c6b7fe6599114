"""Test helper: a stand-in embeddings provider that knows nothing of mockllm.

It answers OpenAI's `POST /v1/embeddings`, Gemini's `…/models/{model}:embedContent` and
`:batchEmbedContents` (under `/v1beta` and `/v1`), Ollama's `POST /api/embed` and `/api/embeddings`,
as each provider shapes its answers, and OpenAI chat completions (tests/scripted_upstream.py's
`echo: …` answers) for a retrieval flow that asks a model after it has searched.

A vector is a bag of words (`embed`): each word adds 1 to the dimension its crc32 picks, then the
vector is scaled to length 1 and rounded to float32, as providers compute them. So texts that
share words are near each other (a similarity search finds the document a query talks about),
equal texts get equal vectors in every process, and other texts differ. A token array is embedded
as the text of its numbers. `dimensions` (OpenAI, Ollama) and `outputDimensionality` (Gemini) set
the length (default `DIM`); OpenAI's `encoding_format: base64` gets the float32 bytes in base64.

It runs on a thread of its own (`with ScriptedEmbeddings() as up:`); `received` keeps every request.
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
import zlib
from typing import Any

from aiohttp import web

from tests.loopback import ThreadedApp
from tests.scripted_upstream import answer_to, chat_read, chat_stream, chat_whole

DIM = 16
WORD = re.compile(r"\w+")


def embed(text: str, dim: int = DIM) -> list[float]:
    """A text's vector (see the module's docstring)."""
    vector = [0.0] * dim
    for word in WORD.findall(text.lower()):
        vector[zlib.crc32(word.encode()) % dim] += 1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return list(struct.unpack(f"<{dim}f", struct.pack(f"<{dim}f", *(v / norm for v in vector))))


def as_base64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def _text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):  # a Gemini content
        return " ".join(str(p.get("text", "")) for p in value.get("parts", []))
    return " ".join(str(v) for v in value)  # a token array


def openai_answer(body: dict[str, Any]) -> dict[str, Any]:
    raw = body["input"]
    inputs = [raw] if isinstance(raw, str) or (raw and isinstance(raw[0], int)) else raw
    dim = body.get("dimensions") or DIM
    vectors = [embed(_text_of(i), dim) for i in inputs]
    wire: list[Any] = [as_base64(v) for v in vectors] if body.get("encoding_format") == "base64" else vectors
    tokens = sum(len(WORD.findall(_text_of(i))) for i in inputs)
    return {"object": "list", "model": f"{body['model']}-0125",
            "data": [{"object": "embedding", "index": n, "embedding": v} for n, v in enumerate(wire)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def gemini_values(request: dict[str, Any]) -> dict[str, Any]:
    return {"values": embed(_text_of(request.get("content")), request.get("outputDimensionality") or DIM)}


class ScriptedEmbeddings(ThreadedApp):
    thread_name = "scripted-embeddings"

    def __init__(self) -> None:
        super().__init__()
        self.received: list[dict[str, Any]] = []

    def requests(self, path_part: str) -> list[dict[str, Any]]:
        """The bodies received at paths holding `path_part`, in order."""
        return [json.loads(r["body"]) for r in self.received if path_part in r["path"]]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.received.append({"path": request.path, "headers": dict(request.headers), "body": raw})
        body = json.loads(raw)
        path = request.path
        if path == "/v1/embeddings":
            if "FAIL" in json.dumps(body.get("input")):
                return web.json_response({"error": {"message": "scripted failure", "type": "server_error",
                                                    "param": None, "code": None}}, status=500)
            return web.json_response(openai_answer(body))
        if path.endswith(":embedContent"):
            return web.json_response({"embedding": gemini_values(body)})
        if path.endswith(":batchEmbedContents"):
            return web.json_response({"embeddings": [gemini_values(r) for r in body["requests"]]})
        if path == "/api/embed":
            inputs = [body["input"]] if isinstance(body["input"], str) else body["input"]
            return web.json_response({"model": body["model"], "embeddings": [
                embed(i, body.get("dimensions") or DIM) for i in inputs], "total_duration": 14143917,
                "load_duration": 1019500, "prompt_eval_count": sum(len(WORD.findall(i)) for i in inputs)})
        if path == "/api/embeddings":
            return web.json_response({"embedding": embed(body["prompt"])})
        # chat completions: the retrieval flow's model call
        answer = answer_to(*chat_read(body))
        model = str(body.get("model") or "m")
        if not body.get("stream"):
            return web.json_response(chat_whole(answer, model))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await response.prepare(request)
        for piece in chat_stream(answer, model, bool((body.get("stream_options") or {}).get("include_usage"))):
            await response.write(piece)
        await response.write_eof()
        return response

    def routes(self, app: web.Application) -> None:
        for path in ("/v1/embeddings", "/api/embed", "/api/embeddings", "/v1/chat/completions",
                     "/v1beta/models/{call}", "/v1/models/{call}"):
            app.router.add_post(path, self._handle)

    @property
    def url(self) -> str:
        """The OpenAI base, `/v1` included ("" until started); `root` is without it: Gemini's and
        Ollama's clients add their own paths."""
        return self.root + "/v1" if self.root else ""
