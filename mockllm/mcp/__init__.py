"""MCP servers beside the model, pure: no HTTP, no replay state of the model's.

`log` is the recording format (`mcp.{NAME}.jsonl`: a header line, then one line per HTTP exchange
with its JSON-RPC messages), read with file:line errors and written line by line; `jsonrpc` holds
the protocol's few names and the key a call is matched by (its method and parameters, `_meta`
aside, after the run's normalisation); `replay` answers a run's calls to one recorded server from
its log: the handshake and every `*/list` as often as asked, other calls in recorded order per
key, a miss as a JSON-RPC error naming the nearest recorded call.
"""
