"""A URL as a person may see it: in a banner, a log line, a run's report, a page.

An upstream may be named with credentials in it (`http://user:pass@host/v1`), and a client may send
its key in the query (Gemini's `?key=`). What mockllm shows of such a URL keeps the scheme, host,
port and path (what tells a reader where a call went) and drops the user information; every query
value is masked but those known to be harmless. `mockllm.json` keeps less still: the host only
(`record.recording.host_of`).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

MASK = "[redacted]"
# Query parameters that never carry a credential, shown as they are (`alt=sse`: Gemini streams).
HARMLESS_QUERY = frozenset({"alt", "stream", "api-version", "beta"})


def shown_url(url: str) -> str:
    """`url` without user information, its query values masked but harmless ones'."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port
    except ValueError:  # not a URL one can take apart: show none of it but its scheme
        return url.partition(":")[0] + ":" + MASK
    if host is None:
        return urlunsplit((parts.scheme, "", parts.path, _query(parts.query), ""))
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, _query(parts.query), ""))


def _query(query: str) -> str:
    if not query:
        return ""
    pairs = parse_qsl(query, keep_blank_values=True)
    return "&".join(f"{quote(k, safe='')}={v if k.lower() in HARMLESS_QUERY else MASK}" for k, v in pairs)


def url_secrets(url: str) -> list[str]:
    """What in `url` is a credential: its user name and password, and its query values but harmless ones'."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found = [v for v in (parts.username, parts.password) if v]
    found += [v for k, v in parse_qsl(parts.query, keep_blank_values=True) if v and k.lower() not in HARMLESS_QUERY]
    return found
