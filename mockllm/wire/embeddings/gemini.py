"""Gemini's `POST …/models/{model}:embedContent` (one content) and `:batchEmbedContents` (a list of
requests, what google-genai's `models.embed_content` sends for one content or many), under
`/v1beta` and `/v1` as the chat routes are. The model is the path's; answers are the recorded ones."""

from __future__ import annotations

from mockllm.scenario.embeddings import GEMINI, GEMINI_BATCH
from mockllm.wire import DIALECTS
from mockllm.wire.embeddings.api import EmbeddingsAPI

_GEMINI = next(d for d in DIALECTS if d.name == "gemini")  # whose error shape


class GeminiEmbedContent(EmbeddingsAPI):
    name = GEMINI
    provider = "gemini"
    routes = ("/v1beta/models/{model}:embedContent", "/v1/models/{model}:embedContent")
    dialect = _GEMINI


class GeminiBatchEmbedContents(EmbeddingsAPI):
    name = GEMINI_BATCH
    provider = "gemini"
    routes = ("/v1beta/models/{model}:batchEmbedContents", "/v1/models/{model}:batchEmbedContents")
    dialect = _GEMINI
