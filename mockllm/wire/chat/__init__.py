"""OpenAI chat completions: one dialect, one folder.

`dialect` is its `Dialect` (routes, rendering an entry as its events, its error bodies), `request`
reads its requests into the neutral `wire.request.Request`, and `stream` decodes a live upstream
stream back into chunks, for record mode.
"""

from mockllm.wire.chat.dialect import ChatCompletions, models_body

__all__ = ["ChatCompletions", "models_body"]
