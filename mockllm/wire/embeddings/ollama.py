"""Ollama's `POST /api/embed` (`input`: a text or a list; `{"embeddings": [[…], …]}`) and the older
`POST /api/embeddings` (`prompt`: one text; `{"embedding": […]}`). Answers are the recorded ones."""

from __future__ import annotations

from mockllm.scenario.embeddings import OLLAMA, OLLAMA_LEGACY
from mockllm.wire import DIALECTS
from mockllm.wire.embeddings.api import EmbeddingsAPI

_OLLAMA = next(d for d in DIALECTS if d.name == "ollama")  # whose error shape


class OllamaEmbed(EmbeddingsAPI):
    name = OLLAMA
    provider = "ollama"
    routes = ("/api/embed",)
    dialect = _OLLAMA


class OllamaEmbeddings(EmbeddingsAPI):
    name = OLLAMA_LEGACY
    provider = "ollama"
    routes = ("/api/embeddings",)
    dialect = _OLLAMA
