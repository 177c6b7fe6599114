"""What every event of one rendered reply repeats. Its own module: the dialects (`dialect`) and
the walk shared by all of them (`render`) both read it, and neither builds on the other for it."""

from __future__ import annotations

import msgspec


class Envelope(msgspec.Struct, frozen=True, gc=False):
    """What every event of one rendered reply repeats: its id, creation time and model."""

    reply_id: str
    created: int
    model: str
