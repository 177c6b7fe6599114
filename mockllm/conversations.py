"""Route header-less requests by their conversation.

A request belongs to the live conversation whose latest request's `messages` are a prefix of its
own (the longest such prefix wins); otherwise it starts a new one. A primary, a spawn child
(`[user(task)]`) and a fork child (the parent's seeded turns, then `user(task)`) all start
differently, so a whole agent tree routes with no session header at all.

Messages are compared after a light normalization, because agents rewrite history in small ways
between calls: `reasoning_content` is dropped (DeepSeek clients strip it from older turns), a
`null` content equals `""`, and content parts are compared by their text. Lookups are O(length of
the request): each conversation is indexed by a hash of its latest request's messages, and a
request's prefix hashes are computed in one pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

_encode = msgspec.json.encode


def message_key(message: Any) -> bytes:
    """A canonical form of one chat message (decoded, or still raw JSON) for prefix comparison."""
    if isinstance(message, msgspec.Raw):
        message = msgspec.json.decode(message)
    if not isinstance(message, dict):
        return _encode(message)
    content = message.get("content")
    if content is None:
        content = ""
    elif isinstance(content, list):
        content = "".join(
            part.get("text", "") if isinstance(part, dict) and "text" in part else _encode(part).decode()
            for part in content
        )
    tool_calls = [
        (call.get("id"), (call.get("function") or {}).get("name"), (call.get("function") or {}).get("arguments"))
        for call in message.get("tool_calls") or ()
        if isinstance(call, dict)
    ]
    return _encode([message.get("role"), content, tool_calls, message.get("tool_call_id"), message.get("name")])


def prefix_hashes(keys: list[bytes]) -> list[int]:
    """hashes[i] identifies keys[:i+1]."""
    out: list[int] = []
    h = 0
    for key in keys:
        h = hash((h, key))
        out.append(h)
    return out


@dataclass(slots=True)
class _Conversation:
    live_id: str
    keys: list[bytes]
    latest: int = 0  # hash of keys, its index key


@dataclass(slots=True)
class ConversationIndex:
    """The live conversations of one run, each indexed by its latest request."""

    _by_latest: dict[tuple[int, int], list[_Conversation]] = field(default_factory=dict)
    _count: int = 0

    def route(self, messages: list[Any]) -> tuple[str, bool]:
        """The live id this request belongs to, and whether it starts a new conversation."""
        keys = [message_key(m) for m in messages]
        hashes = prefix_hashes(keys)
        for length in range(len(keys), 0, -1):
            for conversation in self._by_latest.get((length, hashes[length - 1]), ()):
                if conversation.keys == keys[:length]:  # guard against a hash collision
                    self._move(conversation, keys, hashes)
                    return conversation.live_id, False
        self._count += 1
        conversation = _Conversation(f"conversation-{self._count}", [])
        self._move(conversation, keys, hashes)
        return conversation.live_id, True

    def _move(self, conversation: _Conversation, keys: list[bytes], hashes: list[int]) -> None:
        if conversation.keys:
            old = (len(conversation.keys), conversation.latest)
            bucket = self._by_latest[old]
            bucket.remove(conversation)
            if not bucket:
                del self._by_latest[old]
        conversation.keys = keys
        if keys:
            conversation.latest = hashes[-1]
            self._by_latest.setdefault((len(keys), hashes[-1]), []).append(conversation)
