"""Where a reader of newline-delimited JSON-RPC may end a line other than at ``\\n``, and JSON written so that
no reader ends one anywhere but at its final newline.

Every transport of the proxy cuts its input at ``\\n`` and parses each line once; the next reader cuts it
again its own way. The MCP SDK's stdio server reads a text stream with universal newlines (``\\r`` ends a line
too); a reader built on ``str.splitlines`` also ends one at ``\\x0b``, ``\\x0c``, ``\\x1c``-``\\x1e``, NEL
(U+0085), U+2028 and U+2029. Where two cuts differ, one message judged (a notification, say) is two or three
upstream, and one of them may be a ``tools/call`` nobody judged. The control characters cannot stand in a
line that parsed as JSON (JSON allows them neither raw in a string nor between tokens); ``\\r`` can, as
whitespace, and NEL, U+2028 and U+2029 can, raw in a string, where a JSON escape means the same character.

So the lean relays forward the client's messages re-serialised (``_frames.rewritten``: a ``dumps`` each,
which also drops every other reading of the client's bytes: a key written twice, an escaped name), and
the upstream's as they came when :func:`plain` (a search for single bytes, on what may be megabytes).

:data:`CODEC` is UTF-8 with those three written as escapes: the encoding of the SDK path's stdio upstreams,
whose transport writes each message as the JSON pydantic makes (which leaves them raw).
"""
from __future__ import annotations

import codecs

CODEC = "forewarn-json-lines"
# (in UTF-8 these bytes never occur inside another character: a lead byte starts each)
_ESCAPES = ((b"\xc2\x85", b"\\u0085"), (b"\xe2\x80\xa8", b"\\u2028"), (b"\xe2\x80\xa9", b"\\u2029"))


def plain(frame: bytes) -> bool:
    """Whether JSON that parsed holds no character a reader of lines may end a line at (its final newline
    aside): paid on each of the upstream's messages, so single bytes are looked for first — a one-byte search is a
    memchr (tens of microseconds a megabyte), a longer one is not (milliseconds), and is only made when the
    last byte of NEL, U+2028 or U+2029 is there at all."""
    if b"\r" in frame:
        return False
    if b"\x85" in frame and b"\xc2\x85" in frame:
        return False
    return not ((b"\xa8" in frame or b"\xa9" in frame) and (b"\xe2\x80\xa8" in frame or b"\xe2\x80\xa9" in frame))


def escape_breaks(json: bytes) -> bytes:
    """Compact JSON (no whitespace between tokens, control characters escaped, as orjson and pydantic write it)
    with NEL, U+2028 and U+2029 escaped too: the same value, cut by every reader as one line."""
    if b"\x85" not in json and b"\xa8" not in json and b"\xa9" not in json:  # (memchr: see plain)
        return json
    for raw, escaped in _ESCAPES:
        if raw in json:
            json = json.replace(raw, escaped)
    return json


class _Encoder(codecs.IncrementalEncoder):
    def encode(self, input: str, final: bool = False) -> bytes:
        return escape_breaks(input.encode("utf-8", self.errors))


def _encode(text: str, errors: str = "strict") -> tuple[bytes, int]:
    return escape_breaks(text.encode("utf-8", errors)), len(text)


def _search(name: str) -> codecs.CodecInfo | None:
    if name.replace("_", "-") != CODEC:
        return None
    utf8 = codecs.lookup("utf-8")
    return codecs.CodecInfo(_encode, utf8.decode, incrementalencoder=_Encoder,
                            incrementaldecoder=utf8.incrementaldecoder, name=CODEC)


codecs.register(_search)
