"""The HTTP face: the aiohttp app, its handlers, streaming, and running it."""
