"""Recorded embeddings: the scenario's `embeddings.json`, and finding a recorded answer by content.

An agent that retrieves embeds its documents and its queries beside its model calls (OpenAI's
`POST /v1/embeddings`, Gemini's `:embedContent` and `:batchEmbedContents`, Ollama's `/api/embed` and
`/api/embeddings`). Those calls have no session and no order: a vector store embeds in whatever
batches and order it likes, and asks again for a query it saw. So they are kept apart from the
session tree, as request and answer pairs (`[{"api", "model", "request", "response"}, ...]`), and a
replay answers a request with the same content with that answer, in any order, as often as asked.

What "the same content" is, per API (`call_of`): the model and the inputs (a text, a list of texts,
OpenAI's token arrays, Gemini's contents), and what else changes the vectors (`dimensions`, Gemini's
`taskType`, `title`, `outputDimensionality`). What only changes how the answer is written (OpenAI's
`encoding_format`) or who asks (`user`, Ollama's `keep_alive`) is not compared: the wire module
for the API writes the recorded vectors in the form asked.

Pure: the format, the comparison and the nearest recorded input for a miss's message; no HTTP.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from mockllm.dsh.names import EMBEDDINGS_FILE
from mockllm.dsh.writer import partial_path
from mockllm.errors import RecordingError
from mockllm.scenario.count_tokens import with_cwd

# The embeddings APIs, named after their routes. Each has its request shape, so its own comparison.
OPENAI = "openai/embeddings"
GEMINI = "gemini/embedContent"
GEMINI_BATCH = "gemini/batchEmbedContents"
OLLAMA = "ollama/embed"
OLLAMA_LEGACY = "ollama/embeddings"
APIS = (OPENAI, GEMINI, GEMINI_BATCH, OLLAMA, OLLAMA_LEGACY)

# Gemini's fields, beside the content, that change the vectors (per request in a batch).
_GEMINI_OPTIONS = ("taskType", "title", "outputDimensionality")
SHOWN = 120  # characters of an input a miss's message shows
NEAREST_CANDIDATES = 32  # recorded inputs a miss compares closely (after a cheap bound over all)


class RecordedEmbedding(msgspec.Struct, frozen=True):
    """One recorded embeddings call: which API, the model, the request as sent (secrets masked) and
    the answer as the provider sent it."""

    api: str
    model: str
    request: Any
    response: Any


class EmbeddingCall(NamedTuple):
    """What a request asks, in the form requests are compared in."""

    api: str
    model: str
    inputs: list[Any]  # each input as sent: a text, a token array, a Gemini content
    options: dict[str, Any]  # what else changes the vectors

    @property
    def key(self) -> bytes:
        return msgspec.json.encode([self.api, self.model, self.inputs, self.options], order="sorted")


class BadEmbeddingRequest(ValueError):
    """A request body that is not one of its API's embeddings requests (the message says why)."""


def call_of(api: str, model: str | None, request: Any) -> EmbeddingCall:
    """The comparison form of `request` (a decoded JSON body) to `api`; `model` from the path where
    the API puts it there (Gemini), else None: read from the body. Raises BadEmbeddingRequest."""
    if not isinstance(request, dict):
        raise BadEmbeddingRequest("the body is not a JSON object")
    name = model or request.get("model")  # only Gemini's routes name it
    if not isinstance(name, str) or not name:
        raise BadEmbeddingRequest("the request names no model")
    name = name.removeprefix("models/")
    if api == OPENAI:
        return EmbeddingCall(api, name, _openai_inputs(request.get("input")), _picked(request, ("dimensions",)))
    if api == GEMINI:
        if "content" not in request:
            raise BadEmbeddingRequest("the request has no content to embed")
        return EmbeddingCall(api, name, [request["content"]], _picked(request, _GEMINI_OPTIONS))
    if api == GEMINI_BATCH:
        requests = request.get("requests")
        if not isinstance(requests, list) or not requests or not all(isinstance(r, dict) for r in requests):
            raise BadEmbeddingRequest("the request has no list of requests to embed")
        return EmbeddingCall(api, name, [r.get("content") for r in requests],
                             {"requests": [_picked(r, _GEMINI_OPTIONS) for r in requests]})
    if api == OLLAMA:
        inputs = request.get("input")
        inputs = [inputs] if isinstance(inputs, str) else inputs
        if not isinstance(inputs, list) or not inputs:
            raise BadEmbeddingRequest("the request has no input to embed")
        return EmbeddingCall(api, name, inputs, _picked(request, ("dimensions",)))
    if api == OLLAMA_LEGACY:
        prompt = request.get("prompt")
        if not isinstance(prompt, str):
            raise BadEmbeddingRequest("the request has no prompt to embed")
        return EmbeddingCall(api, name, [prompt], {})
    raise BadEmbeddingRequest(f"unknown embeddings API {api!r}; known: {', '.join(APIS)}")


def _openai_inputs(value: Any) -> list[Any]:
    """OpenAI's `input`: a text, a token array, or a list of either; one string and a list of that one
    string ask the same (the answer has one item either way)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value:
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return [value]  # one token array
        if all(isinstance(v, str | list) for v in value):
            return value
    raise BadEmbeddingRequest("the input is not a text, a token array, or a non-empty list of them")


def _picked(request: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    return {n: request[n] for n in names if request.get(n) is not None}


def input_text(value: Any) -> str:
    """An input as a person reads it: a text as is, a Gemini content's texts joined, tokens listed."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        parts = value.get("parts")
        if isinstance(parts, list):
            return " ".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in parts)
    return msgspec.json.encode(value).decode()


class EmbeddingStore:
    """A scenario's recorded embeddings, found by content (`{{cwd}}` in recorded requests read as the
    run's folder, as for every recorded input)."""

    def __init__(self, path: Path, recorded: list[RecordedEmbedding], calls: list[EmbeddingCall]) -> None:
        self.path = path
        self.recorded = recorded
        self._calls = calls  # per recorded pair, as written
        self._by_cwd: dict[str | None, dict[bytes, int]] = {}

    def __len__(self) -> int:
        return len(self.recorded)

    def find(self, call: EmbeddingCall, cwd: str | None = None) -> int | None:
        """Which recorded pair (0-based) answers a request with `call`'s content; the first recorded
        when several do; None when none does."""
        index = self._by_cwd.get(cwd)
        if index is None:
            index = self._by_cwd[cwd] = self._index(cwd)
        return index.get(call.key)

    def _index(self, cwd: str | None) -> dict[bytes, int]:
        index: dict[bytes, int] = {}
        for number, (pair, call) in enumerate(zip(self.recorded, self._calls, strict=True)):
            if cwd is not None:
                call = call_of(pair.api, pair.model, with_cwd(pair.request, cwd))
            index.setdefault(call.key, number)
        return index

    def nearest(self, call: EmbeddingCall) -> tuple[str, str]:
        """The recorded input most like the first of `call`'s inputs that no recorded call has (for a
        miss's message), and which API, model and options it was recorded with; ("", why) when none."""
        recorded = [(c, input_text(i)) for c in self._calls for i in c.inputs]
        if not recorded:
            return "", f"{self.path.name} records no embeddings call"
        same = [(c, r) for c, r in recorded if c.api == call.api and c.model == call.model] or recorded
        texts = [input_text(i) for i in call.inputs]
        known = {r for _, r in same}  # every input known, in another batch or with other options: the first
        wanted = next((t for t in texts if t not in known), texts[0] if texts else "")
        matcher = difflib.SequenceMatcher(None, autojunk=False)
        matcher.set_seq2(wanted)

        def likeness(quick: bool) -> Callable[[tuple[EmbeddingCall, str]], float]:
            def score(pair: tuple[EmbeddingCall, str]) -> float:
                matcher.set_seq1(pair[1])
                return matcher.quick_ratio() if quick else matcher.ratio()
            return score

        # A store holds thousands of chunks: the cheap bound first, the real ratio for the likeliest few.
        likely = sorted(same, key=likeness(True), reverse=True)[:NEAREST_CANDIDATES]
        best, text = max(likely, key=likeness(False))
        return short(text), f"{best.api}, model {best.model}" + (f", {best.options}" if best.options else "")

    def models(self) -> list[str]:
        """The models recorded, in first-recorded order."""
        return list(dict.fromkeys(p.model for p in self.recorded))


def short(text: str) -> str:
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def read_embeddings(folder: Path) -> EmbeddingStore | None:
    """The recorded embeddings of a scenario folder; None when it has none. Raises RecordingError
    naming the file, the pair and what is wrong."""
    path = folder / EMBEDDINGS_FILE
    if not path.is_file():
        return None
    try:
        recorded = msgspec.json.decode(path.read_bytes(), type=list[RecordedEmbedding])
    except msgspec.DecodeError as exc:
        raise RecordingError(path, None, f"not a list of {{\"api\", \"model\", \"request\", \"response\"}} "
                             f"objects: {exc}") from None
    calls = []
    for number, pair in enumerate(recorded):
        try:
            calls.append(call_of(pair.api, pair.model, pair.request))
        except BadEmbeddingRequest as exc:
            raise RecordingError(path, None, f"pair {number + 1} (`$[{number}]`): {exc}") from None
        if not isinstance(pair.response, dict):
            raise RecordingError(path, None, f"pair {number + 1} (`$[{number}]`): the response is not a JSON object")
    return EmbeddingStore(path, recorded, calls)


def write_embeddings(folder: Path, pairs: Sequence[RecordedEmbedding], *, durable: bool = False) -> None:
    """Write the embeddings calls a recording saw; nothing when it saw none. Rewritten whole and
    renamed into place (never half a file); `durable`: fsync'd first."""
    if not pairs:
        return
    path = folder / EMBEDDINGS_FILE
    partial = partial_path(path)
    with partial.open("wb") as out:
        # One pair a line: a vector's floats one a line would make a file nobody can read or diff.
        out.write(b"[\n" + b",\n".join(msgspec.json.encode(p) for p in pairs) + b"\n]\n")
        if durable:
            out.flush()
            os.fsync(out.fileno())
    os.replace(partial, path)
