"""The names the dsh format fixes: event types, packed row types, and the files of a session tree.

They are spelled here once, because a reader, a writer, the derivation and the recorder that
disagreed on one of them would still each run: a log written under one spelling would silently
replay nothing under another.
"""

from __future__ import annotations

import re

# The header line (line 0 of every log).
HEADER_TYPE = "session"

# Event types mockllm reads or writes; a log may hold others, which are kept and skipped.
TURN_START = "turn/start"
TURN_END = "turn/end"
STEP_START = "step/start"
STEP_END = "step/end"
USER_MESSAGE = "user/message"
CHUNK_EVENT = "assistant/chunk"
ASSISTANT_MESSAGE = "assistant/message"
TOOL_CALL = "tool/call"
TOOL_RESULT = "tool/result"
COMPACTION_EVENT = "compaction/summary"
REQUEST_CONTEXT = "request/context"
REQUEST_HEADER = "request/header"

# Packed rows: a run of same-block delta chunks in one line, expanded by the reader.
TEXT_CHUNKS = "text-chunks"
REASONING_CHUNKS = "reasoning-chunks"
TOOL_CALL_CHUNKS = "tool-call-chunks"
PACKED_TYPES = (TEXT_CHUNKS, REASONING_CHUNKS, TOOL_CALL_CHUNKS)

# A scenario folder's files.
PRIMARY_FILE = "session.jsonl"
CHILD_FILE = re.compile(r"session\.(\d+)\.jsonl")  # group 1: the child's number
LOG_PREFIX = "session"  # every log's name starts with it, finished or `.partial`
SIDECAR_FILE = "replay.override.json"
MANIFEST_FILE = "mockllm.json"
# A log (or sidecar) being written carries this suffix until it is complete; loaders never read it.
PARTIAL_SUFFIX = ".partial"


def child_file(number: int) -> str:
    """The file name of child log `number` (1-based): `session.1.jsonl`, ..."""
    return f"session.{number}.jsonl"
# Anthropic's token counts (`POST /v1/messages/count_tokens`) as recorded: request and answer pairs.
COUNT_TOKENS_FILE = "count_tokens.json"
# Embeddings calls (OpenAI, Gemini, Ollama) as recorded: request and answer pairs, replayed by content.
EMBEDDINGS_FILE = "embeddings.json"
