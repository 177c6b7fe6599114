"""Hosting an aiohttp app on a port, in-process or until signalled: one way for the server and the recorder."""
