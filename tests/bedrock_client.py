"""Test helpers for the Bedrock Converse dialect: boto3's `bedrock-runtime` client on a mockllm base
root, what a client should see for an entry, and what it saw.

The expectation is computed from the recorded chunks alone, spelling out the wire mapping here
(not by calling the dialect), so a mapping bug fails the comparison. Empty fragments are left out
on both sides.

boto3 is synchronous: the tests' servers run on the test's own event loop, so every call goes
through `asyncio.to_thread`. Credentials are fake and set in the environment (`fake_aws`), the
region is us-east-1, `endpoint_url` is always set and IMDS is off: boto3 never reaches the network.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from mockllm.dsh.chunks import FinishChunk, UsageChunk
from mockllm.script.entries import Entry
from tests.entry_pieces import ended_blocks, entry_pieces

MODEL_ID = "anthropic.claude-3-5-sonnet-20240620-v1:0"  # a `:` botocore percent-encodes in the path
STOP_REASONS = {"stop": "end_turn", "tool-calls": "tool_use", "max-tokens": "max_tokens"}
# An `error` finish: these codes were a normal stop on the wire; any other is its code, lowercased.
ERROR_STOPS = {"EMPTY_RESPONSE": "end_turn", "CONTENT_FILTER": "content_filtered"}
FAKE_KEY_ID = "AKIAMOCKLLMFAKEKEY01"
FAKE_SECRET = "mockllm/fake/secret/key/never/real/0000000"

# The keys mockllm signs with when recording (the environment's), apart from the client's own.
UPSTREAM_KEY = "AKIAUPSTREAMSIGNING01"
UPSTREAM_SECRET = "upstream/secret/only/in/the/environment/000"

AWS_ENV = {"AWS_ACCESS_KEY_ID": FAKE_KEY_ID, "AWS_SECRET_ACCESS_KEY": FAKE_SECRET, "AWS_REGION": "us-east-1",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


def fake_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake AWS credentials and region in the environment; no profile, no instance metadata (call
    it from a test module's autouse fixture)."""
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/mockllm-test-aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/mockllm-test-aws-credentials")


def root(base_url: str) -> str:
    """A mockllm base URL (ending in /v1) as a boto3 `endpoint_url`."""
    return base_url.removesuffix("/v1")


def client(endpoint: str, headers: dict[str, str] | None = None, *, retries: int = 0,
           timeout: float | None = None) -> Any:
    """boto3's bedrock-runtime client on a mockllm base root; `headers` added to every request."""
    assert not endpoint.endswith("/v1"), endpoint
    config = Config(region_name="us-east-1", retries={"max_attempts": retries, "mode": "standard"},
                    read_timeout=timeout or 60, connect_timeout=5)
    sdk = boto3.client("bedrock-runtime", endpoint_url=endpoint, config=config,
                       aws_access_key_id=FAKE_KEY_ID, aws_secret_access_key=FAKE_SECRET)
    if headers:
        def add(request: Any, **_: Any) -> None:
            for name, value in headers.items():
                request.headers[name] = value

        sdk.meta.events.register("before-send.bedrock-runtime.*", add)
    return sdk


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"text": text}]}]


async def off_loop(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return await asyncio.to_thread(call, *args, **kwargs)


def expected_from_entry(entry: Entry) -> dict[str, Any]:
    """What converse_stream shows for a recorded entry: (kind, fragment) pairs, calls, stop, usage."""
    fragments: list[tuple[str, str]] = []
    calls: dict[int, dict[str, Any]] = {}
    usage = {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}
    stop = "end_turn"
    for piece in entry_pieces(entry):
        if isinstance(piece, UsageChunk):
            u = piece.usage
            usage = {"inputTokens": u.inputTokens, "outputTokens": u.outputTokens,
                     "totalTokens": u.inputTokens + u.outputTokens + (u.cacheReadTokens or 0)
                     + (u.cacheWriteTokens or 0)}
            if u.cacheReadTokens is not None:
                usage["cacheReadInputTokens"] = u.cacheReadTokens
            if u.cacheWriteTokens is not None:
                usage["cacheWriteInputTokens"] = u.cacheWriteTokens
        elif isinstance(piece, FinishChunk) and piece.reason.kind == "error":
            code = piece.reason.error_code or "error"
            stop = ERROR_STOPS.get(code, code.lower())
        elif isinstance(piece, FinishChunk):
            stop = STOP_REASONS[piece.reason.kind]
        elif piece.kind == "tool-call":
            call = calls.setdefault(piece.block_index, {"toolUseId": piece.id, "name": piece.name, "input": ""})
            call["toolUseId"], call["name"] = call["toolUseId"] or piece.id, call["name"] or piece.name
            call["input"] += piece.text
        elif piece.text:
            fragments.append((piece.kind, piece.text))
    ended = ended_blocks(entry)
    for index, call in calls.items():
        if index in ended:
            call["toolUseId"] = call["toolUseId"] or ended[index].id
            call["name"] = call["name"] or ended[index].name
        call["input"] = json.loads(call["input"]) if call["input"].strip() else {}
    return {"fragments": fragments, "tool_calls": list(calls.values()), "stop": stop, "usage": usage}


def converse_stream(sdk: Any, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """`converse_stream` read to its end: fragments, whole tool calls, the stop reason, usage."""
    received: dict[str, Any] = {"fragments": [], "tool_calls": [], "stop": None, "usage": None}
    response = sdk.converse_stream(modelId=extra.pop("modelId", MODEL_ID), messages=messages, **extra)
    calls: dict[int, dict[str, Any]] = {}
    for event in response["stream"]:
        if "contentBlockStart" in event:
            start = event["contentBlockStart"]
            use = start["start"]["toolUse"]
            calls[start["contentBlockIndex"]] = {"toolUseId": use["toolUseId"], "name": use["name"], "input": ""}
        elif "contentBlockDelta" in event:
            delta, index = event["contentBlockDelta"]["delta"], event["contentBlockDelta"]["contentBlockIndex"]
            if delta.get("text"):
                received["fragments"].append(("text", delta["text"]))
            elif "reasoningContent" in delta and delta["reasoningContent"].get("text"):
                received["fragments"].append(("reasoning", delta["reasoningContent"]["text"]))
            elif "toolUse" in delta:
                calls[index]["input"] += delta["toolUse"]["input"]
        elif "messageStop" in event:
            received["stop"] = event["messageStop"]["stopReason"]
        elif "metadata" in event:
            received["usage"] = event["metadata"]["usage"]
    for call in calls.values():
        call["input"] = json.loads(call["input"]) if call["input"].strip() else {}
        received["tool_calls"].append(call)
    return received


def converse(sdk: Any, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """`converse`: the same shape; fragments are the whole blocks."""
    response = sdk.converse(modelId=extra.pop("modelId", MODEL_ID), messages=messages, **extra)
    received: dict[str, Any] = {"fragments": [], "tool_calls": [], "stop": response["stopReason"],
                                "usage": response["usage"]}
    for block in response["output"]["message"]["content"]:
        if block.get("text"):
            received["fragments"].append(("text", block["text"]))
        elif "reasoningContent" in block and block["reasoningContent"]["reasoningText"]["text"]:
            received["fragments"].append(("reasoning", block["reasoningContent"]["reasoningText"]["text"]))
        elif "toolUse" in block:
            received["tool_calls"].append(dict(block["toolUse"]))
    return received


def whole(fragments: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Streamed fragments as a whole answer's blocks: consecutive fragments of one kind joined."""
    out: list[tuple[str, str]] = []
    for kind, text in fragments:
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + text)
        else:
            out.append((kind, text))
    return out


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_no_secret(folder: Path, upstream: Any) -> None:
    """No key (the client's, the environment's) and no signature the upstream saw in any byte written under `folder`."""
    recorded = b"".join(files(folder).values())
    assert recorded, "something was written"
    secrets = [FAKE_KEY_ID, FAKE_SECRET, UPSTREAM_KEY, UPSTREAM_SECRET, "AWS4-HMAC-SHA256", "Signature="]
    secrets += [r["headers"]["Authorization"].rpartition("Signature=")[2] for r in upstream.received]
    assert not [s for s in secrets if s.encode() in recorded], "no key or signature in any recorded byte"
