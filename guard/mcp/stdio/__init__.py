"""The lean relay over stdio (``forewarn mcp ... -- UPSTREAM_CMD``): :mod:`.relay` relays one client to one
upstream command, its two ends asyncio protocols (:mod:`._pipes`) over this process's standard input and output
(:mod:`._transport`, which the SDK path's stdio serving uses too). A call is handled by :mod:`..lean`."""
