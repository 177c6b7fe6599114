"""Google Gemini (generateContent): one dialect, one folder.

`dialect` is its `Dialect` (routes, rendering an entry as its events, its error bodies), `request`
reads its requests into the neutral `wire.request.Request`, and `stream` decodes a live upstream
stream back into chunks, for record mode.
"""

from mockllm.wire.gemini.dialect import Gemini

__all__ = ["Gemini"]
