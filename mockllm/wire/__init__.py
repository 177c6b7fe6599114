"""Wire dialects: StreamChunks -> bytes a provider's SDK parses (pure: no aiohttp)."""
