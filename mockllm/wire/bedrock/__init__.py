"""Amazon Bedrock Converse: one dialect, one folder.

`dialect` is its `Dialect` (routes, rendering an entry as its events, its error bodies),
`eventstream` frames its streamed events in AWS's binary event-stream encoding, `request` reads
its requests into the neutral `wire.request.Request`, `stream` decodes a live upstream stream back
into chunks, and `signing` signs a call again for the upstream (record mode).
"""

from mockllm.wire.bedrock.dialect import BedrockConverse

__all__ = ["BedrockConverse"]
