"""A scripted Amazon Bedrock Converse upstream for record-mode tests: it knows nothing of mockllm.

It serves `POST /model/{modelId}/converse` and `/converse-stream` as Bedrock does (JSON, or AWS's
binary event stream framed here with its own few lines, not mockllm's encoder) and checks each
request's SigV4 signature with botocore against the credentials it was given: a request signed
for another host, with other keys or a changed body is refused with Bedrock's 403, as AWS refuses
it. Its answers follow the conversation: a `toolResult` in the last message gets a text answer
quoting it; a first turn that offers tools calls the first one; a message saying REFUSE gets a
400 `ValidationException`; anything else is echoed.
"""

from __future__ import annotations

import json
import re
from struct import pack
from typing import Any
from zlib import crc32

from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.loopback import ThreadedApp

_AUTH = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                   r"SignedHeaders=([^,]+), Signature=([0-9a-f]{64})")


def _header(name: str, value: str) -> bytes:
    key, text = name.encode(), value.encode()
    return bytes([len(key)]) + key + b"\x07" + pack(">H", len(text)) + text


def frame(event_type: str, payload: dict[str, Any]) -> bytes:
    """One event-stream message, as Bedrock frames each event."""
    headers = (_header(":event-type", event_type) + _header(":content-type", "application/json")
               + _header(":message-type", "event"))
    body = json.dumps(payload).encode()
    prelude = pack(">II", 16 + len(headers) + len(body), len(headers))
    head = prelude + pack(">I", crc32(prelude)) + headers
    return head + body + pack(">I", crc32(head + body))


def answer_to(body: dict[str, Any], new_id: str) -> list[dict[str, Any]]:
    """The content blocks the scripted model answers with."""
    messages = body.get("messages") or []
    last = messages[-1]["content"] if messages else []
    results = [block["toolResult"] for block in last if isinstance(block, dict) and "toolResult" in block]
    if results:
        said = [item.get("text") or json.dumps(item.get("json")) for r in results for item in r.get("content", [])]
        return [{"text": f"The tool said: {' '.join(said)}"}]
    tools = (body.get("toolConfig") or {}).get("tools") or []
    if tools and len(messages) == 1:
        name = tools[0]["toolSpec"]["name"]
        return [{"reasoningContent": {"reasoningText": {"text": "I should call a tool.", "signature": "sig"}}},
                {"toolUse": {"toolUseId": new_id, "name": name, "input": {"city": "Paris"}}}]
    text = " ".join(b.get("text", "") for b in last if isinstance(b, dict))
    return [{"text": f"echo: {text}"}]


def stream_events(content: list[dict[str, Any]], stop: str, usage: dict[str, int]) -> list[bytes]:
    events = [frame("messageStart", {"role": "assistant"})]
    for index, block in enumerate(content):
        if "toolUse" in block:
            use = block["toolUse"]
            events.append(frame("contentBlockStart", {"contentBlockIndex": index, "start": {
                "toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}}))
            arguments = json.dumps(use["input"])
            for part in (arguments[:5], arguments[5:]):
                events.append(frame("contentBlockDelta", {"contentBlockIndex": index,
                                                          "delta": {"toolUse": {"input": part}}}))
        elif "reasoningContent" in block:
            reasoning = block["reasoningContent"]["reasoningText"]
            for word in reasoning["text"].split(" "):
                events.append(frame("contentBlockDelta", {"contentBlockIndex": index, "delta": {
                    "reasoningContent": {"text": word + " "}}}))
            events.append(frame("contentBlockDelta", {"contentBlockIndex": index, "delta": {
                "reasoningContent": {"signature": reasoning["signature"]}}}))
        else:
            text = block["text"]
            for part in (text[: len(text) // 2], text[len(text) // 2 :]):
                events.append(frame("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": part}}))
        events.append(frame("contentBlockStop", {"contentBlockIndex": index}))
    events.append(frame("messageStop", {"stopReason": stop}))
    events.append(frame("metadata", {"usage": usage, "metrics": {"latencyMs": 12}}))
    return events


class ScriptedBedrock(ThreadedApp):
    """Serves on 127.0.0.1 in a thread of its own (`with ScriptedBedrock(key, secret) as upstream:`)."""

    thread_name = "scripted-bedrock"

    def __init__(self, access_key: str, secret_key: str, region: str = "us-east-1") -> None:
        super().__init__()
        self.credentials = Credentials(access_key, secret_key)
        self.region = region
        self.received: list[dict[str, Any]] = []
        self.refused: list[str] = []
        self._ids = 0

    def verify(self, request: web.Request, body: bytes) -> str | None:
        """Why the request's SigV4 signature is not good, or None when it is."""
        match = _AUTH.fullmatch(request.headers.get("Authorization", ""))
        if match is None:
            return "no SigV4 Authorization header"
        key, day, region, service, signed, signature = match.groups()
        if key != self.credentials.access_key:
            return f"signed with another key ({key})"
        if (region, service) != (self.region, "bedrock"):
            return f"signed for {region}/{service}"
        stamp = request.headers.get("X-Amz-Date", "")
        if not stamp.startswith(day):
            return "X-Amz-Date does not match the credential scope"
        names = signed.split(";")
        headers = {name: request.headers.get(name, "") for name in names}
        url = f"http://{request.host}{request.raw_path}"
        aws = AWSRequest(method=request.method, url=url, data=body, headers=headers)
        aws.context["timestamp"] = stamp
        auth = SigV4Auth(self.credentials, "bedrock", self.region)
        expected = auth.signature(auth.string_to_sign(aws, auth.canonical_request(aws)), aws)
        return None if expected == signature else "signature mismatch"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.received.append({"path": request.raw_path, "headers": dict(request.headers), "body": body})
        wrong = self.verify(request, body)
        if wrong is not None:
            self.refused.append(wrong)
            return web.json_response({"message": f"The request signature we calculated does not match: {wrong}"},
                                     status=403, headers={"x-amzn-errortype": "InvalidSignatureException"})
        self._ids += 1
        asked = json.loads(body)
        if "REFUSE" in json.dumps(asked["messages"][-1]):  # as Bedrock refuses a request it cannot serve
            return web.json_response({"message": "The model refused this scripted request."}, status=400,
                                     headers={"x-amzn-errortype": "ValidationException:http://internal.amazon.com/"})
        content = answer_to(asked, f"tooluse_scripted_{self._ids}")
        stop = "tool_use" if any("toolUse" in block for block in content) else "end_turn"
        usage = {"inputTokens": 20 + self._ids, "outputTokens": 7, "totalTokens": 27 + self._ids}
        if request.match_info["verb"] == "converse":
            return web.json_response({"output": {"message": {"role": "assistant", "content": content}},
                                      "stopReason": stop, "usage": usage, "metrics": {"latencyMs": 12}})
        response = web.StreamResponse(headers={"Content-Type": "application/vnd.amazon.eventstream"})
        await response.prepare(request)
        for event in stream_events(content, stop, usage):
            await response.write(event)
        await response.write_eof()
        return response

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/model/{modelId:.+}/{verb:converse(?:-stream)?}", self._handle)

    @property
    def url(self) -> str:
        """The endpoint URL a boto3 client takes ("" until started)."""
        return self.root
