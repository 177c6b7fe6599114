"""What every event of one rendered reply repeats. Its own module: the dialects (`dialect`) and
the walk shared by all of them (`render`) both read it, and neither builds on the other for it."""

from __future__ import annotations

import msgspec


class Envelope(msgspec.Struct, frozen=True, gc=False):
    """What every event of one rendered reply repeats: its id, creation time and model.

    `recorded`: the provider's envelope was recorded for the call (`wire.recorded`), so where a
    dialect's stream says usage twice, its first (Anthropic's `message_start`, sent before any
    output) counts no output tokens, as the provider's; a client that adds the two (LangChain's
    ChatAnthropic) then counts the recorded output once. Trees recorded before say the final count
    in both, as they always did (their replay keeps its bytes)."""

    reply_id: str
    created: int
    model: str
    recorded: bool = False
