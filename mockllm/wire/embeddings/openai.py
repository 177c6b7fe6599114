"""OpenAI's `POST /v1/embeddings`: a text, a token array or a list of either; `encoding_format`
float or base64; `dimensions`.

The answer is the recorded one. When the client asks the other `encoding_format` than the recording
holds (the openai SDK asks base64 unless told otherwise; LangChain and plain HTTP ask float), each
vector is rewritten in the form asked: base64 is the little-endian float32 bytes of the vector, as
OpenAI sends it, so floats read back from it are the recorded floats as float32, which is what the
provider computed. Nothing else in the answer changes.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

import msgspec

from mockllm.scenario.embeddings import OPENAI, RecordedEmbedding
from mockllm.wire import CHAT
from mockllm.wire.embeddings.api import EmbeddingsAPI


def to_base64(vector: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def to_floats(encoded: str) -> list[float]:
    raw = base64.b64decode(encoded)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


class OpenAIEmbeddings(EmbeddingsAPI):
    name = OPENAI
    provider = "openai"
    routes = ("/v1/embeddings",)
    dialect = CHAT

    def answer(self, recorded: RecordedEmbedding, request: Any) -> bytes:
        wanted = request.get("encoding_format") or "float"
        response = recorded.response
        data = response.get("data")
        if not isinstance(data, list) or not any(_needs(item, wanted) for item in data):
            return msgspec.json.encode(response)  # as recorded: the usual case, no vector touched
        items = [_rewritten(item, wanted) if _needs(item, wanted) else item for item in data]
        return msgspec.json.encode({**response, "data": items})


def _needs(item: Any, wanted: str) -> bool:
    if not isinstance(item, dict):
        return False
    vector = item.get("embedding")
    return isinstance(vector, str) if wanted == "float" else isinstance(vector, list)


def _rewritten(item: dict[str, Any], wanted: str) -> dict[str, Any]:
    vector = item["embedding"]
    return {**item, "embedding": to_floats(vector) if wanted == "float" else to_base64(vector)}
