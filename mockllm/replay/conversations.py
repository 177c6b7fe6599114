"""Route header-less requests by their conversation.

A request belongs to the live conversation whose latest request's `messages` are a prefix of its
own (the longest such prefix wins); otherwise it starts a new one. A primary, a spawn child
(`[user(task)]`) and a fork child (the parent's seeded turns, then `user(task)`) all start
differently, so a whole agent tree routes with no session header at all.

Messages are compared in their neutral form (`wire.request.Message`), which each dialect builds
with a light normalization, because agents rewrite history in small ways between calls: reasoning
is dropped (DeepSeek clients strip it from older turns), a `null` content equals `""`, and content
parts are compared by their text. Lookups are O(length of the request): each conversation is
indexed by a hash of its latest request's messages, and a request's prefix hashes are computed in
one pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from mockllm.wire.request import Message

_encode = msgspec.json.encode


def message_key(message: Message) -> bytes:
    """A canonical form of one neutral message, for prefix comparison."""
    return _encode(message)


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
    _by_id: dict[str, _Conversation] = field(default_factory=dict)
    _count: int = 0

    def owns(self, live_id: str) -> bool:
        """Whether `live_id` names a conversation this index started."""
        return live_id in self._by_id

    def closest(self, messages: list[Message], *, exclude: str | None = None
                ) -> tuple[str, int, Message | None, Message | None] | None:
        """The live conversation whose latest request agrees longest with `messages`: (its live id,
        how many leading messages agree, its message where they part, this request's there).

        For error messages only: it looks at every conversation of the run."""
        keys = [message_key(m) for m in messages]
        best: tuple[str, int, Message | None, Message | None] | None = None
        for conversation in self._by_id.values():
            if conversation.live_id == exclude:
                continue
            agreed = 0
            for theirs, ours in zip(conversation.keys, keys, strict=False):
                if theirs != ours:
                    break
                agreed += 1
            if best is None or agreed > best[1]:
                theirs_at = conversation.keys[agreed] if agreed < len(conversation.keys) else None
                best = (conversation.live_id, agreed, _message(theirs_at),
                        messages[agreed] if agreed < len(messages) else None)
        return best

    def route(self, messages: list[Message]) -> tuple[str, bool]:
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
        self._by_id[conversation.live_id] = conversation
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


def _message(key: bytes | None) -> Message | None:
    return msgspec.json.decode(key, type=Message) if key is not None else None
