"""`GET …/v1/models` in each client's shape: the one model a scenario's recording called.

The path is the same for OpenAI and Anthropic clients, so the request's headers tell them apart:
the Anthropic SDK always sends `anthropic-version`.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

ANTHROPIC_VERSION = "anthropic-version"


def models_body(model: str, headers: Mapping[str, str]) -> bytes:
    if ANTHROPIC_VERSION in headers:
        entry = {"type": "model", "id": model, "display_name": model, "created_at": "1970-01-01T00:00:00Z"}
        return msgspec.json.encode({"data": [entry], "has_more": False, "first_id": model, "last_id": model})
    return msgspec.json.encode({"object": "list", "data": [{"id": model, "object": "model", "created": 0,
                                                            "owned_by": "mockllm"}]})
