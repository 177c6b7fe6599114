"""Test helper: one HTTP/1.1 request written byte by byte, for what no client library sends (a
header that is not UTF-8, a path as received, a gzip body), and its answer read whole."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit


async def raw_request(url: str, path: bytes, *, method: bytes = b"POST", headers: tuple[bytes, ...] = (),
                      body: bytes = b"", timeout: float = 20) -> tuple[int, dict[str, str], bytes]:
    """Send `method path` to `url`'s host with `headers` (each `b"Name: value"`) and `body`; the status,
    the answer's headers (lowercased names) and its body."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        head = [method + b" " + path + b" HTTP/1.1", b"Host: " + parts.netloc.encode(), b"Connection: close",
                b"Content-Length: " + str(len(body)).encode(), *headers]
        writer.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        raw = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
    head_bytes, _, rest = raw.partition(b"\r\n\r\n")
    lines = head_bytes.decode("latin-1").split("\r\n")
    answer_headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    if "chunked" in answer_headers.get("transfer-encoding", ""):
        rest = _unchunk(rest)
    return int(lines[0].split()[1]), answer_headers, rest


def _unchunk(data: bytes) -> bytes:
    out = b""
    while data:
        size, _, data = data.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        out, data = out + data[:n], data[n + 2:]
    return out


def json_of(body: bytes) -> Any:
    return json.loads(body)
