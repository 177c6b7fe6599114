"""The seam every embeddings API shares: its routes, its requests read into the comparison form,
its recorded answer written for a request, its errors in its provider's shape.

Embeddings are not a chat dialect: no script, no session, no stream. An API is a route (or two:
Gemini under `/v1beta` and `/v1`) under every base root, a request read into
`scenario.embeddings.EmbeddingCall`, and the recorded answer written back as the client asked it
(OpenAI's `encoding_format`). Errors take the error shape of the provider's chat dialect, which its
client already parses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from mockllm.errors import TOO_DEEP, RequestError
from mockllm.scenario.embeddings import BadEmbeddingRequest, EmbeddingCall, RecordedEmbedding, call_of
from mockllm.wire.dialect import Dialect


class EmbeddingsAPI:
    """One provider's embeddings route(s). Subclasses set the names and may write answers their way."""

    name: str  # the API's name in embeddings.json (scenario.embeddings.APIS)
    provider: str  # which `--upstream PROVIDER=URL` its live calls go to
    routes: tuple[str, ...]  # under each base root
    dialect: Dialect  # the provider's chat dialect: whose error shape its errors take

    def read(self, body: bytes, params: Mapping[str, str]) -> tuple[EmbeddingCall, Any]:
        """The request's comparison form and its decoded body; RequestError saying what is wrong."""
        try:
            decoded = msgspec.json.decode(body)
        except msgspec.DecodeError as exc:
            raise RequestError(f"the {self.name} body is not JSON: {exc}") from None
        except RecursionError:
            raise RequestError(TOO_DEEP) from None
        try:
            return call_of(self.name, params.get("model"), decoded), decoded
        except BadEmbeddingRequest as exc:
            raise RequestError(f"not an {self.name} request: {exc}") from None

    def answer(self, recorded: RecordedEmbedding, request: Any) -> bytes:
        """The recorded answer for `request` (its decoded body): as the provider sent it."""
        return msgspec.json.encode(recorded.response)

    def error_body(self, message: str, code: str, status: int) -> bytes:
        return self.dialect.error_body(message, code, status)
