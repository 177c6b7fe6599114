"""A live Bedrock call signed again (SigV4) for its upstream, in record mode.

The client signed its request for mockllm's host, and a signature covers the host and the path,
so it cannot go upstream as it came: its `Authorization` and `x-amz-*` signing headers are
dropped (never forwarded, never written) and the call is signed again with the environment's AWS
credentials (botocore's default chain: `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/
`AWS_SESSION_TOKEN`, a profile, SSO, an instance role). botocore does the signing, not a
hand-written SigV4: it is the reference implementation the upstream checks against, it knows
the canonicalisation rules (path double-encoding, header folding, session tokens) and the
credential chain, and it is an optional extra (`mockllm-replay[bedrock]`), imported only here.

The model id in the path is percent-encoded again as botocore sends it (`…-v1%3A0`, an ARN's
`%2F`): mockllm routed it decoded. The region is the upstream host's
(`bedrock-runtime.{region}.amazonaws.com`), else the one the client signed for, else
`AWS_REGION`/`AWS_DEFAULT_REGION`, else us-east-1.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from mockllm.errors import RecordError

SERVICE = "bedrock"  # bedrock-runtime's signing name
_SIGNING = frozenset((b"authorization", b"x-amz-date", b"x-amz-security-token", b"x-amz-content-sha256"))
_HOST_REGION = re.compile(r"bedrock-runtime(?:-fips)?\.([a-z0-9-]+)\.amazonaws\.com")
_SCOPE_REGION = re.compile(rb"Credential=[^/,]+/\d{8}/([a-z0-9-]+)/")
_ROUTE = re.compile(r"^(.*?/model/)(.+)/(converse(?:-stream)?)$")

_session: Any = None  # one botocore session per process: its credential chain is resolved once


def _credentials() -> Any:
    global _session
    try:
        import botocore.session
    except ImportError:
        raise RecordError("recording Bedrock calls signs them again with botocore: "
                          "pip install 'mockllm-replay[bedrock]'") from None
    if _session is None:
        _session = botocore.session.get_session()
    credentials = _session.get_credentials()
    if credentials is None:
        raise RecordError("no AWS credentials to sign the call to the Bedrock upstream with: set "
                          "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile) where mockllm runs")
    return credentials.get_frozen_credentials()


def region_of(url: str, headers: list[tuple[bytes, bytes]]) -> str:
    match = _HOST_REGION.search(urlsplit(url).hostname or "")
    if match is not None:
        return str(match.group(1))
    for name, value in headers:
        if name.lower() == b"authorization":
            scope = _SCOPE_REGION.search(value)
            if scope is not None:
                return scope.group(1).decode()
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def encoded_url(url: str) -> str:
    """The URL with its model id percent-encoded as botocore sends it (once: a path forwarded as
    received is encoded already)."""
    parts = urlsplit(url)
    match = _ROUTE.match(parts.path)
    if match is None:
        return url
    path = f"{match.group(1)}{quote(unquote(match.group(2)), safe='-._~')}/{match.group(3)}"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def signed(method: str, url: str, headers: list[tuple[bytes, bytes]],
           body: bytes) -> tuple[str, list[tuple[bytes, bytes]]]:
    """The call's URL and headers, signed for the upstream; raises RecordError without credentials."""
    credentials = _credentials()
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    region = region_of(url, headers)
    url = encoded_url(url)
    kept = [(name, value) for name, value in headers if name.lower() not in _SIGNING]
    request = AWSRequest(method=method, url=url, data=body,
                         headers={name.decode("latin-1"): value.decode("latin-1") for name, value in kept})
    SigV4Auth(credentials, SERVICE, region).add_auth(request)
    out = [(name.encode("latin-1"), value.encode("latin-1") if isinstance(value, str) else value)
           for name, value in request.headers.items()]
    return url, out
