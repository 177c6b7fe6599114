"""A run's replay of its scenario's MCP servers (no HTTP): what each JSON-RPC message gets.

- `initialize` and `server/discover` get their recorded answer as often as asked (the nth
  `initialize` of a run the nth recorded one, then the last), each `*/list` the recorded answer
  to the same parameters (else the method's first), and `ping` its recorded answer or an empty
  result. A `server/discover` on a recording made with the handshake is answered as the recorded
  server would have (method not found), so a 2.x client falls back to `initialize`.
- Any other request (`tools/call`, `resources/read`, `prompts/get`, ...) matches the recorded
  calls with the same key (method and parameters, `_meta` aside, masked as model inputs are: the
  run's `ignore_input` and normalisation): each repeat takes the next recorded answer, the calling
  agent session's own first (its session header), then its MCP session's, then the earliest. A
  `tools/call` asked more often than recorded is a miss; a read or a prompt repeats its last answer.
- A miss answers a JSON-RPC error naming the nearest recorded call and is a divergence of the run.
- Notifications and the client's answers to a server's requests are accepted (202), not matched.

Answers keep what was recorded; only the JSON-RPC id is the caller's, and a progress token the
caller chose is put where the recorded one was.
"""

from __future__ import annotations

import difflib
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from mockllm.mcp.jsonrpc import (
    HANDSHAKE,
    META,
    METHOD_NOT_FOUND,
    PING,
    UNRECORDED,
    Mask,
    asked,
    call_key,
    describe,
    error,
    is_answer,
    is_list,
    is_notification,
    is_request,
    protocol_of,
)
from mockllm.mcp.log import Exchange, McpLog


class McpCall(msgspec.Struct, frozen=True, omit_defaults=True):
    """One JSON-RPC request a run's agent made to an MCP server, as the report and inspector show it."""

    server: str
    method: str
    what: str  # the call in words: `tools/call count {"step":2}`
    time: float  # epoch seconds
    session: str | None = None  # the calling agent session (session header)
    mcp_session: str | None = None  # the Mcp-Session-Id it came with
    line: int | None = None  # the recorded exchange that answered it (its line in the file)
    error: str | None = None  # a miss: why
    live: bool = False  # new_episodes: the upstream answered it


class McpMiss(msgspec.Struct, frozen=True):
    """A request no recorded call answers: what was asked and the nearest recorded call."""

    server: str
    file: str
    call: int  # 0-based among this run's requests to the server
    session: str | None
    what: str
    nearest: str
    why: str


@dataclass(slots=True)
class Answer:
    """What one POSTed message gets: its answer's messages (none for a notification), whether the
    recording streamed it (SSE), and the exchange it came from."""

    messages: list[Any]
    sse: bool = False
    status: int = 200
    exchange: Exchange | None = None
    miss: McpMiss | None = None


@dataclass(slots=True)
class _Index:
    """A log's exchanges sorted for matching, under one mask."""

    handshake: dict[str, list[Exchange]]
    lists: dict[str, list[Exchange]]  # key -> its recorded answers
    first_list: dict[str, list[Exchange]]  # method -> its recorded answers
    calls: dict[str, list[Exchange]]  # key -> every recorded answer, in order
    pings: list[Exchange]
    stream: Exchange | None  # the server's GET stream, if the recording opened one
    keys: dict[int, str]  # seq -> key


def index(log: McpLog, mask: Mask | None) -> _Index:
    built = _Index({}, {}, {}, {}, [], None, {})
    for exchange in log.exchanges:
        if exchange.http == "GET":
            if built.stream is None and exchange.status == 200:
                built.stream = exchange
            continue
        method = exchange.method
        if method is None or not is_request(exchange.request) or exchange.answer is None:
            continue
        params = exchange.request.get("params")
        if method in HANDSHAKE:
            built.handshake.setdefault(method, []).append(exchange)
        elif method == PING:
            built.pings.append(exchange)
        else:
            key = call_key(method, params, mask)
            built.keys[exchange.seq] = key
            if is_list(method):
                built.lists.setdefault(key, []).append(exchange)
                built.first_list.setdefault(method, []).append(exchange)
            else:
                built.calls.setdefault(key, []).append(exchange)
    return built


@dataclass(slots=True)
class McpReplay:
    """One run's replay of one recorded MCP server."""

    log: McpLog
    mask: Mask | None = None
    calls: list[McpCall] = field(default_factory=list)
    misses: list[McpMiss] = field(default_factory=list)
    requests: int = 0
    _index: _Index = field(init=False)
    _used: set[int] = field(default_factory=set)  # seqs of recorded calls answered
    _last: dict[str, Exchange] = field(default_factory=dict)  # key -> the last answer served
    _initialized: int = 0
    _session_ids: dict[str, int] = field(default_factory=dict)  # live Mcp-Session-Id -> recorded mcp_session
    _sessions: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def __post_init__(self) -> None:
        self._index = index(self.log, self.mask)

    @property
    def server(self) -> str:
        return self.log.server

    def went_live(self, message: dict[str, Any], session: str | None, mcp_session_id: str | None) -> None:
        """A call the recording could not serve went to the server (new_episodes): reported, not a miss."""
        method = message["method"]
        self.calls.append(McpCall(self.server, method, describe(method, message.get("params")), time.time(),
                                  session, mcp_session_id, None, None, True))

    @property
    def stream(self) -> Exchange | None:
        return self._index.stream

    def recorded_calls(self) -> int:
        return sum(len(v) for v in self._index.calls.values())

    def served_calls(self) -> int:
        return len(self._used)

    def session_id(self, answer: Answer) -> str | None:
        """The Mcp-Session-Id an `initialize` answer gives: the recorded one (None where none was)."""
        exchange = answer.exchange
        if exchange is None or exchange.session_id is None:
            return None
        if exchange.mcp_session is not None:
            self._session_ids[exchange.session_id] = exchange.mcp_session
        return exchange.session_id

    def answer(self, message: Any, session: str | None = None, mcp_session_id: str | None = None,
               protocol: str | None = None, *, live: bool = False) -> Answer:
        """What one JSON-RPC message gets (a batch's messages are asked one by one). `protocol` is the
        MCP-Protocol-Version it came with: answers recorded in that version are preferred. `live`: a
        miss will be sent to the server (new_episodes), so it is no divergence; `went_live` notes it."""
        if is_notification(message) or is_answer(message):
            return Answer([], status=202)
        if not is_request(message):
            return Answer([error(None, -32600, "not a JSON-RPC 2.0 request")], status=400)
        method: str = message["method"]
        params = message.get("params")
        protocol = protocol_of(message, protocol)
        number, self.requests = self.requests, self.requests + 1
        found, miss = self._find(method, params, session, mcp_session_id, number, protocol)
        call = McpCall(self.server, method, describe(method, params), time.time(), session, mcp_session_id,
                       found.line if found is not None else None, miss.why if miss is not None else None)
        if found is None and miss is not None and live:
            return Answer([], miss=miss)
        self.calls.append(call)
        if found is None:
            if miss is None:  # discover on a handshake-era recording: the recorded server knew no such method
                return Answer([error(message["id"], METHOD_NOT_FOUND, f"Method not found: {method}")])
            self.misses.append(miss)
            return Answer([error(message["id"], UNRECORDED, f"mockllm: {miss.why}",
                                 {"mockllm": "mcp_unrecorded", "nearest": miss.nearest})], miss=miss)
        return Answer(_rewrite(found, message), found.sse, found.status, found)

    def _find(self, method: str, params: Any, session: str | None, mcp_session_id: str | None,
              number: int, protocol: str | None = None) -> tuple[Exchange | None, McpMiss | None]:
        built = self._index
        if method in HANDSHAKE:
            recorded = built.handshake.get(method)
            if not recorded:
                if method == "server/discover" and "initialize" in built.handshake:
                    return None, None
                return None, self._miss(method, params, session, number, "the recording never did that "
                                        f"({'initialize' if 'initialize' in built.handshake else 'server/discover'}"
                                        " was its handshake)")
            if method == "initialize":  # the nth of the run the nth recorded, one asking the same version first
                asked_for = params.get("protocolVersion") if isinstance(params, dict) else None
                same = [e for e in recorded if (e.request.get("params") or {}).get("protocolVersion") == asked_for]
                pool = same or recorded
                chosen = pool[min(self._initialized, len(pool) - 1)]
                self._initialized += 1
                return chosen, None
            return recorded[0], None
        if method == PING:
            if built.pings:
                return built.pings[0], None
            return Exchange(seq=-1, time=0, request={"jsonrpc": "2.0", "id": 0, "method": PING},
                            response=[{"jsonrpc": "2.0", "id": 0, "result": {}}]), None
        key = call_key(method, params, self.mask)
        if is_list(method):
            listed = built.lists.get(key) or built.first_list.get(method)
            if not listed:
                return None, self._miss(method, params, session, number, "the recording never listed it")
            return next((e for e in listed if e.protocol == protocol), listed[0]), None
        recorded = built.calls.get(key, [])
        unused = [e for e in recorded if e.seq not in self._used]
        if unused:
            mcp_session = self._session_ids.get(mcp_session_id or "")
            chosen = (next((e for e in unused if session is not None and e.session == session), None)
                      or next((e for e in unused if mcp_session is not None and e.mcp_session == mcp_session), None)
                      or next((e for e in unused if protocol is not None and e.protocol == protocol), None)
                      or unused[0])
            self._used.add(chosen.seq)
            self._last[key] = chosen
            return chosen, None
        if recorded and method != "tools/call":
            return self._last.get(key, recorded[-1]), None
        if recorded:
            why = (f"{describe(method, params)} was recorded {len(recorded)} time(s) in {self.log.file}; this is "
                   f"one call more than were recorded")
            return None, self._miss(method, params, session, number, why, nearest=describe(method, params))
        return None, self._miss(method, params, session, number, "no recorded call matches it")

    def _miss(self, method: str, params: Any, session: str | None, number: int, why: str,
              nearest: str | None = None) -> McpMiss:
        what = describe(method, params)
        if nearest is None:
            nearest = self.nearest(method, params)
        text = f"{what}: {why}; nearest recorded call: {nearest}"
        return McpMiss(self.server, self.log.file, number, session, what, nearest, text)

    def nearest(self, method: str, params: Any) -> str:
        """The recorded call most like this one (same method first, then same tool name), in words
        with its line; `none` when the server recorded no call at all."""
        wanted = describe(method, params, limit=10_000)
        name = asked(params).get("name") if isinstance(asked(params), dict) else None
        best: tuple[tuple[int, int, float], Exchange] | None = None
        for exchange in self.log.exchanges:
            other = exchange.method
            if other is None or other in HANDSHAKE or other == PING or not is_request(exchange.request):
                continue
            other_params = exchange.request.get("params")
            other_name = asked(other_params).get("name") if isinstance(asked(other_params), dict) else None
            ratio = difflib.SequenceMatcher(None, wanted, describe(other, other_params, limit=10_000)).ratio()
            score = (int(other == method), int(name is not None and other_name == name), ratio)
            if best is None or score > best[0]:
                best = (score, exchange)
        if best is None:
            return f"none ({self.log.file} holds no call)"
        exchange = best[1]
        return f"{describe(exchange.method or '', exchange.request.get('params'))} ({self.log.file}:{exchange.line})"


def _rewrite(exchange: Exchange, message: dict[str, Any]) -> list[Any]:
    """The recorded answer's messages with the caller's id on the response, and the caller's progress
    token where the recorded request's was."""
    recorded = exchange.request if isinstance(exchange.request, dict) else {}
    old_id = recorded.get("id")
    old_token = _progress_token(recorded)
    new_token = _progress_token(message)
    out = []
    for sent in exchange.response:
        if not isinstance(sent, dict):
            continue
        if "method" not in sent and sent.get("id") == old_id:
            sent = {**sent, "id": message["id"]}
        elif old_token is not None and sent.get("method") == "notifications/progress":
            params = sent.get("params")
            if isinstance(params, dict) and params.get("progressToken") == old_token:
                sent = {**sent, "params": {**params, "progressToken": new_token}}
        out.append(sent)
    return out


def _progress_token(message: dict[str, Any]) -> Any:
    params = message.get("params")
    meta = params.get(META) if isinstance(params, dict) else None
    return meta.get("progressToken") if isinstance(meta, dict) else None


@dataclass(slots=True)
class McpRun:
    """A run's MCP servers: each recorded one's replay, made on its first call."""

    logs: dict[str, McpLog]
    mask: Mask | None = None
    servers: dict[str, McpReplay] = field(default_factory=dict)

    def server(self, name: str) -> McpReplay | None:
        replay = self.servers.get(name)
        if replay is None and name in self.logs:
            replay = self.servers[name] = McpReplay(self.logs[name], self.mask)
        return replay

    @property
    def calls(self) -> list[McpCall]:
        """Every server's calls, in the order they came."""
        return sorted((c for s in self.servers.values() for c in s.calls), key=lambda c: c.time)

    @property
    def misses(self) -> list[McpMiss]:
        return [m for s in self.servers.values() for m in s.misses]
