"""The lean relay over streamable HTTP (``forewarn mcp --upstream-url URL --http HOST:PORT``): :mod:`.relay`, an
ASGI app (its request and answer plumbing in :mod:`._asgi`) in front of one upstream reached by its URL through
httpx2 (:mod:`._upstream`), its sessions in :mod:`._sessions`. A call is handled by :mod:`..lean`."""
