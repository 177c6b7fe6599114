"""Embeddings APIs: OpenAI's, Gemini's two and Ollama's two, one module per provider (`api` is the
seam). Served under every base root beside the chat dialects; recorded into and replayed from the
scenario's `embeddings.json` (`scenario.embeddings`)."""

from __future__ import annotations

from mockllm.wire.embeddings.api import EmbeddingsAPI
from mockllm.wire.embeddings.gemini import GeminiBatchEmbedContents, GeminiEmbedContent
from mockllm.wire.embeddings.ollama import OllamaEmbed, OllamaEmbeddings
from mockllm.wire.embeddings.openai import OpenAIEmbeddings

EMBEDDINGS_APIS: tuple[EmbeddingsAPI, ...] = (OpenAIEmbeddings(), GeminiEmbedContent(), GeminiBatchEmbedContents(),
                                              OllamaEmbed(), OllamaEmbeddings())

__all__ = ["EMBEDDINGS_APIS", "EmbeddingsAPI"]
