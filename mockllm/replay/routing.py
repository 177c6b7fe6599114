"""Which live session a request comes from: one rule, for replay and for record mode.

A session header names it (the first of `options.session_header_names()` the request carries);
else the request continues an earlier reply by id (OpenAI Responses' `previous_response_id`) and
belongs to the session that reply went to; else its conversation decides (`conversations.py`).
Replay binds the session found to a recorded script, record mode records under it: were the two
to decide apart, a recording's sessions would not be the ones its replay routes to.

What a continued reply id or a conversation maps to is each side's own state, so the caller
passes those lookups in; the order of the three is decided here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from mockllm.errors import RequestError
from mockllm.wire.request import Request


def header_session(headers: Mapping[str, str], names: Sequence[str]) -> str | None:
    """The value of the first of the session headers `names` that `headers` carry (empty counts).
    Raises RequestError for a value that is not UTF-8 (see `text_header`)."""
    for name in names:
        value = text_header(headers, name)
        if value is not None:
            return value
    return None


def text_header(headers: Mapping[str, str], name: str) -> str | None:
    """A header's value, which must be UTF-8 text: it names a session, and a session's id is written in
    logs, journals and reports. aiohttp keeps bytes that are not UTF-8 as lone surrogates, which no
    file or JSON answer can hold: such a value is a RequestError naming the header, never a session."""
    value = headers.get(name)
    if value is None or value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        shown = value.encode("utf-8", "surrogateescape").decode("latin-1")
        raise RequestError(f"header {name}: {shown!r} is not UTF-8 text; send it as UTF-8 (Python's urllib "
                           "and http.client send latin-1: pass the value encoded as UTF-8 bytes)") from None
    return value


def calling_session(header_id: str | None, request: Request, continued: Callable[[str], str | None],
                    by_conversation: Callable[[Request], str]) -> str:
    """The calling session's id: `header_id` (see `header_session`); else `continued(reply id)` when
    the request continues a reply and that names a session; else `by_conversation(request)`."""
    if header_id is not None:
        return header_id
    if request.continues is not None:
        session = continued(request.continues)
        if session is not None:
            return session
    return by_conversation(request)
