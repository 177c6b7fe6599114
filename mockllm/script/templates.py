"""Serve-time placeholders in scripted strings.

`{{fromRequest:<regex>}}` becomes the last match of the regex (its first group, else the whole
match) in every string value of the request's conversation (`Request.raw_conversation`: chat
completions' `messages`, Anthropic's `system` and `messages`, Responses' `instructions` and
`input`), depth-first, joined by newlines.
`{{cwd}}` becomes the run's working folder when one was given, and is left as is otherwise.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from mockllm.errors import TemplateError
from mockllm.script.entries import FROM_REQUEST, Entry

CWD = "{{cwd}}"


def request_text(conversation: Any) -> str:
    """Every string value in a request's conversation, depth-first, joined by newlines."""
    out: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, msgspec.Raw):  # a request's conversation stays undecoded until needed
            value = msgspec.json.decode(value)
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(conversation)
    return "\n".join(out)


def from_request(pattern: str, haystack: str) -> str:
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise TemplateError(f"{{{{fromRequest:{pattern}}}}}: bad pattern ({exc})") from None
    last = None
    for last in regex.finditer(haystack):  # noqa: B007 - the last match wins
        pass
    if last is None:
        raise TemplateError(f"{{{{fromRequest:{pattern}}}}} matched nothing in the request's messages")
    return last.group(1) if regex.groups else last.group(0)


def resolve_entry(entry: Entry, conversation: Any, cwd: str | None) -> Entry:
    """A copy of `entry` with every placeholder in its strings replaced."""
    haystack: list[str] = []  # built on first use: most entries have no fromRequest

    def text() -> str:
        if not haystack:
            haystack.append(request_text(conversation))
        return haystack[0]

    def resolve(value: str) -> str:
        if "{{" not in value:
            return value
        value = FROM_REQUEST.sub(lambda m: from_request(m.group(1), text()), value)
        return value.replace(CWD, cwd) if cwd is not None else value

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return resolve(value)
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    resolved: Entry = msgspec.convert(walk(msgspec.to_builtins(entry)), Entry)
    return resolved

