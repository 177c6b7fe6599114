"""Wire dialects: each turns neutral script entries into one API's bytes, and its requests into
neutral ones. Registering a dialect is one line here; the server serves every registered one
under every base address.

The seam every dialect shares: `request` (a live request in neutral form), `dialect` (the Dialect
and StreamDecoder a dialect implements), `render` (how any entry becomes a Reply: the entry read
once, then walked into one dialect's events), `reply` (the Reply the server writes), `sse` (SSE
framing and event templates), `envelope` (what every event of a reply repeats). Each dialect is
one folder, `<name>/` with `dialect` (its events and error bodies), `request` (its requests read)
and `stream` (a live stream decoded back, for record mode): chat (OpenAI chat completions),
anthropic (Anthropic Messages), responses (OpenAI Responses), gemini, ollama, bedrock (Amazon
Bedrock Converse). A new dialect copies one folder and adds one line here.
"""

from __future__ import annotations

from mockllm.wire.anthropic import AnthropicMessages
from mockllm.wire.bedrock import BedrockConverse
from mockllm.wire.chat import ChatCompletions, models_body
from mockllm.wire.dialect import Dialect
from mockllm.wire.gemini import Gemini
from mockllm.wire.ollama import Ollama
from mockllm.wire.responses import Responses

CHAT = ChatCompletions()
# The shape of errors outside any model route (admin, unknown paths): OpenAI's, as most clients parse.
DEFAULT: Dialect = CHAT

# Served under every base root (`/`, `/scenarios/{name}`, `/runs/{run}`), in this order.
DIALECTS: tuple[Dialect, ...] = (CHAT, AnthropicMessages(), Responses(), Gemini(), Ollama(), BedrockConverse())



def dialect_named(name: str) -> Dialect | None:
    """The registered dialect called `name` (`Dialect.name`), if any."""
    return next((d for d in DIALECTS if d.name == name), None)


__all__ = ["CHAT", "DEFAULT", "DIALECTS", "Dialect", "dialect_named", "models_body"]
