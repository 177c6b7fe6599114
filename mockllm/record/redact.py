"""`--redact REGEX` and `--cwd DIR`: rewrite every string the recorder writes.

`--redact` masks secrets with `[REDACTED]`, and so is every credential the client forwarded in the
recorded session (`learn`: its headers' values but harmless ones', the upstream URL's user
information and query values), should the upstream echo one back; `--cwd` writes `{{cwd}}` for the agent's working
folder, as dsh does, so that a replay serves the run's own folder there (`script.templates`). The
folder counts only as a whole path: `/work/app` in `/work/app/x.py` or at the end of a sentence
(`in /work/app.`) is replaced, in `/work/apple`, `/work/app-2` or `/work/app.txt` it is not. It is
replaced before any `--redact` pattern runs.

A streamed answer arrives in fragments, and a secret (or a path) can straddle two of them, where no
pattern sees it. So the deltas of one block are rewritten together: matches are found in the
block's whole text and the characters they cover are cut from every fragment, the replacement
standing where a match starts. The rewritten fragments then still join to the rewritten whole (the
`block-end` text), and a replay streams no piece of the secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from mockllm.dsh.chunks import (
    Block,
    BlockEnd,
    Failure,
    FinishChunk,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
)
from mockllm.errors import BadRedaction
from mockllm.script.templates import CWD

MASK = "[REDACTED]"


class Redactor:
    def __init__(self, patterns: Iterable[str | re.Pattern[str]] = (), *, cwd: str | None = None) -> None:
        """Raises BadRedaction naming a pattern that is not a regular expression."""
        self.rules: list[tuple[re.Pattern[str], str]] = []  # (pattern, what replaces a match), in order
        folder = cwd.rstrip("/\\") if cwd else ""
        if folder:
            # A word character, `-` or `.x` right after it would make it another file's name.
            self.rules.append((re.compile(re.escape(folder) + r"(?![\w-]|\.\w)"), CWD))
        self.rules += [(p if isinstance(p, re.Pattern) else _compile(p), MASK) for p in patterns]
        self._learned: set[str] = set()  # credentials seen in forwarded requests (`learn`)
        self._learned_rule: int | None = None  # where their one rule is in `rules`

    def __bool__(self) -> bool:
        return bool(self.rules)

    def learn(self, secrets: Iterable[str]) -> None:
        """Mask these credentials (as written, literally) from now on: a key the client forwarded may
        come back in an error body or an answer's content, and must not be written then either."""
        new = [s for s in dict.fromkeys(secrets) if s and s not in self._learned]
        if not new:
            return
        self._learned.update(new)
        # One pattern for them all (longest first, so a key is masked whole where another is its prefix):
        # a session's credentials cost one pass over each string, however many there are.
        rule = (re.compile("|".join(re.escape(s) for s in sorted(self._learned, key=len, reverse=True))), MASK)
        if self._learned_rule is None:
            self._learned_rule = len(self.rules)
            self.rules.append(rule)
        else:
            self.rules[self._learned_rule] = rule

    def text(self, value: str) -> str:
        for pattern, replacement in self.rules:
            value = pattern.sub(replacement, value)  # both replacements hold no backslash or group reference
        return value

    def value(self, value: Any) -> Any:
        """Every string inside a JSON-like value masked (keys are the format's, not data)."""
        if not self.rules:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        return value

    def fragments(self, parts: Sequence[str]) -> list[str]:
        """`parts` rewritten as one text: `"".join(result) == self.text("".join(parts))`."""
        out = list(parts)
        for pattern, replacement in self.rules:
            out = _mask_across(pattern, replacement, out)
        return out


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise BadRedaction(f"--redact {pattern!r} is not a regular expression: {exc}; fix it, or escape "
                           "the characters meant literally") from None


def _mask_across(pattern: re.Pattern[str], replacement: str, parts: list[str]) -> list[str]:
    whole = "".join(parts)
    spans = [m.span() for m in pattern.finditer(whole) if m.end() > m.start()]
    if not spans:
        return parts
    out: list[str] = []
    start = 0  # offset of the current part in `whole`
    for part in parts:
        end = start + len(part)
        pieces: list[str] = []
        cursor = start
        for s, e in spans:
            if e <= cursor or s >= end:
                continue
            if s >= cursor:
                pieces.append(whole[cursor:s])
                pieces.append(replacement)  # where the match starts, once
            cursor = max(cursor, min(e, end))
        pieces.append(whole[cursor:end])
        out.append("".join(pieces))
        start = end
    return out


def redact_chunks(redactor: Redactor, chunks: Sequence[StreamChunk]) -> list[StreamChunk]:
    """A call's chunks with every string masked; each block's deltas are masked together."""
    if not redactor:
        return list(chunks)
    deltas: dict[int, list[int]] = {}  # block index -> positions of its delta chunks
    for position, chunk in enumerate(chunks):
        if isinstance(chunk, TextDelta | ReasoningDelta | ToolCallDelta):
            deltas.setdefault(chunk.index, []).append(position)
    out: list[StreamChunk] = [_redact_chunk(redactor, c) for c in chunks]
    for positions in deltas.values():
        texts = [_delta_text(chunks[p]) for p in positions]
        for p, text in zip(positions, redactor.fragments(texts), strict=True):
            chunk = out[p]
            if isinstance(chunk, ToolCallDelta):
                out[p] = msgspec.structs.replace(chunk, argumentsDelta=text)
            else:
                assert isinstance(chunk, TextDelta | ReasoningDelta)
                out[p] = msgspec.structs.replace(chunk, text=text)
    return out


def _delta_text(chunk: StreamChunk) -> str:
    if isinstance(chunk, ToolCallDelta):
        return chunk.argumentsDelta
    assert isinstance(chunk, TextDelta | ReasoningDelta)
    return chunk.text


def _redact_chunk(redactor: Redactor, chunk: StreamChunk) -> StreamChunk:
    """Every string but the deltas' fragments (masked per block by the caller)."""
    mask = redactor.value
    if isinstance(chunk, ToolCallDelta):
        return msgspec.structs.replace(chunk, id=mask(chunk.id), name=mask(chunk.name))
    if isinstance(chunk, BlockEnd):
        block = chunk.block
        return BlockEnd(chunk.index, Block(block.type, text=mask(block.text), id=mask(block.id),
                                           name=mask(block.name), arguments=mask(block.arguments)))
    if isinstance(chunk, FinishChunk):
        reason = chunk.reason
        failure = reason.failure
        return FinishChunk(msgspec.structs.replace(
            reason, message=mask(reason.message), code=mask(reason.code),
            failure=None if failure is None else Failure(mask(failure.message), mask(failure.code))))
    return chunk
