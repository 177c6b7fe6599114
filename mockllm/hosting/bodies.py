"""Reading a request body whole, bounded in size and in time, whatever its `Content-Encoding`.

aiohttp would inflate a compressed request body as it arrives, with no bound: 1.5 MB of gzip
inflating to 1.5 GB took 16 s and 380 MB to refuse, while every other client waited. mockllm's
servers turn that off (`listen`) and inflate here instead, stopping at the body limit: a bomb is
refused (None: the caller answers 413) after inflating at most `limit` bytes, on a worker thread
when the compressed body is large, so the event loop keeps serving the other runs meanwhile.
"""

from __future__ import annotations

import asyncio
import zlib

from aiohttp import web

from mockllm.hosting import guard

# A compressed body up to this size is inflated on the loop (well under a millisecond); a larger one on a thread.
# The largest request body mockllm reads, inflated, on every route and in the recorder (which could
# not record what no replay serves): agent histories get long; far past that is a client bug.
MAX_BODY = 64 * 1024 * 1024
INLINE_INFLATE = 64 * 1024
STEP = 1024 * 1024  # bytes inflated per step: the limit is checked between steps
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


async def read_body(request: web.Request, limit: int) -> bytes | None:
    """The request body, inflated, or None when it is (or inflates to) over `limit` bytes.

    Raises `web.HTTPRequestTimeout` when the body takes over `guard.BODY_TIMEOUT` seconds to arrive,
    and `web.HTTPUnsupportedMediaType` for a content encoding other than gzip or deflate.

    A small body arrives with its request head, so when the handler runs it is all buffered
    already: it is taken as it is, sparing aiohttp's read loop (measured in a running server:
    ~5 us of the ~19 us a request spent before its first write). Anything else is read as usual.
    """
    content = request.content
    if content.is_eof():
        body = content.read_nowait()
        if len(body) > limit:
            return None
    else:
        try:
            async with asyncio.timeout(guard.BODY_TIMEOUT):
                body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return None
        except TimeoutError:
            raise web.HTTPRequestTimeout(text=f"the request body took over {guard.BODY_TIMEOUT:g} s to arrive",
                                         headers={"Connection": "close"}) from None
    coding = request.headers.get("Content-Encoding")
    if coding is None or coding.strip().lower() in ("", "identity"):
        return body
    wbits = _WBITS.get(coding.strip().lower())
    if wbits is None:
        raise web.HTTPUnsupportedMediaType(text=f"Content-Encoding {coding!r}: only gzip and deflate are read")
    if len(body) <= INLINE_INFLATE:
        return inflate(body, wbits, limit)
    return await asyncio.to_thread(inflate, body, wbits, limit)


def inflate(data: bytes, wbits: int, limit: int) -> bytes | None:
    """`data` inflated, or None once it passes `limit` bytes (or is not what its encoding says)."""
    inflater = zlib.decompressobj(wbits)
    out = bytearray()
    try:
        while True:
            out += inflater.decompress(data, STEP)
            if len(out) > limit:
                return None
            data = inflater.unconsumed_tail
            if not data:
                break
        out += inflater.flush()
    except zlib.error:
        raise web.HTTPBadRequest(text="the request body is not what its Content-Encoding says") from None
    return bytes(out) if len(out) <= limit else None
