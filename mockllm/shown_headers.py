"""Which request headers a person may see, and which of their values are credentials.

The journal (the inspector page, a run's state, a report kept as a CI artifact) shows the
client's own `x-…` headers. A value is shown only when its header's name is on an allowlist of
headers known to carry no credential; every other value is `[redacted]`. A denylist of suspicious
words cannot work: `x-jwt`, `cookie`, `api-key` (Azure) or a vendor's `x-…-session-bearer` hold
none of the words one would think of.

The same allowlist says what a recorder must treat as a credential it was given: every value of a
header off the list (`Authorization`'s token after its scheme, each cookie's value). Those values
are masked wherever the recording writes them, in case the upstream echoes one back
(`record.redact.Redactor.learn`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

REDACTED = "[redacted]"
# Headers whose values are shown: routing (mockllm's, dsh's), the SDKs' own telemetry, request ids.
HARMLESS = frozenset({
    "x-mockllm-session", "x-mockllm-parent", "x-mockllm-fork", "x-deepseek-harness-session-id",
    "x-deepseek-harness-compact", "x-request-id", "x-client-request-id", "x-should-retry",
    # Not x-… headers (the journal does not show them), but never a credential: no secret to learn.
    "content-type", "content-length", "accept", "accept-encoding", "accept-language", "user-agent", "host",
    "connection", "keep-alive", "transfer-encoding", "te", "expect", "origin", "referer", "cache-control",
    "pragma", "anthropic-version", "anthropic-beta", "openai-beta", "openai-version", "content-encoding",
    "upgrade", "sec-websocket-version", "traceparent", "tracestate",
})
HARMLESS_PREFIXES = ("x-stainless-", "x-mockllm-", "x-deepseek-harness-", "sec-fetch-", "sec-ch-")
# A value shorter than this is not masked in recorded text: `api_key="x"` would mask every x.
SECRET_MIN = 8


def is_harmless(name: str) -> bool:
    """Whether a header (lowercased name) is known never to carry a credential."""
    return name in HARMLESS or name.startswith(HARMLESS_PREFIXES)


def shown_value(name: str, value: str) -> str:
    """A header's value as a person may see it (`name` lowercased)."""
    return value if is_harmless(name) else REDACTED


def header_secrets(raw_headers: Iterable[tuple[bytes, bytes]], harmless: Collection[str] = ()) -> list[str]:
    """The credentials among a request's headers: the values of every header off the allowlist and not
    in `harmless` (lowercased names: the configured session headers), an authorization's credentials
    after its scheme, each cookie's value; those long enough to mask safely."""
    found: list[str] = []
    for raw_name, raw_value in raw_headers:
        name = raw_name.decode("latin-1").lower()
        if is_harmless(name) or name in harmless:
            continue
        value = raw_value.decode("utf-8", "replace").strip()
        found.append(value)
        if name in ("authorization", "proxy-authorization"):
            found.append(value.partition(" ")[2].strip())
        elif name == "cookie":
            found += [part.partition("=")[2].strip() for part in value.split(";")]
    return [v for v in dict.fromkeys(found) if len(v) >= SECRET_MIN]
