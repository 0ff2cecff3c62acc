"""Personal data redacted with the ``pii`` extra (Presidio's recognizers that need no language model): an
e-mail address, a phone number and a credit-card number, in a text and in what a real SDK server returns
through the proxy, over stdio and streamable HTTP."""
from __future__ import annotations

from pathlib import Path

import anyio
import pytest

pytest.importorskip("presidio_analyzer")

from _gateway_server import PERSON
from test_gateway_checks import client_of, rows

from forewarn.errors import ConfigError
from forewarn.guard import GuardModel
from forewarn.guard.mcp.redact import RedactPolicy, redact_result, redact_text

MASKED = "Ann Smith, [REDACTED:email], [REDACTED:phone], card [REDACTED:credit_card]"


def test_an_email_a_phone_and_a_card_are_masked_where_they_stand() -> None:
    out, records = redact_text(PERSON, RedactPolicy.from_config("pii"))
    assert out == MASKED
    spans = [(r.kind, r.offset, r.length) for r in records]
    assert spans == [("email", PERSON.index("ann.smith"), len("ann.smith@example.com")),
                     ("phone", PERSON.index("+1"), len("+1 415-555-0132")),
                     ("credit_card", PERSON.index("4111"), len("4111 1111 1111 1111"))]


def test_only_the_kinds_asked_for_and_above_the_threshold_are_masked() -> None:
    only_cards = RedactPolicy.from_config({"kinds": [], "entropy": False, "pii": ["credit_card"]})
    assert redact_text(PERSON, only_cards)[0] == PERSON.replace("4111 1111 1111 1111", "[REDACTED:credit_card]")
    # a phone number with no context words scores 0.4 in Presidio: a threshold above that keeps it
    strict = RedactPolicy.from_config({"kinds": [], "entropy": False, "pii": True, "pii_threshold": 0.5})
    assert redact_text(PERSON, strict)[0] == "Ann Smith, [REDACTED:email], +1 415-555-0132, card [REDACTED:credit_card]"
    # a number that fails Luhn's check is no card; a word with an @ and no known domain suffix is no address
    assert redact_text("card 4111 1111 1111 1112, mail ann@host.invalidtld", RedactPolicy.from_config("pii"))[1] == []
    both = RedactPolicy.from_config(["jwt", "email"])
    assert both.kinds == {"jwt"} and both.pii == {"email"}
    assert RedactPolicy.from_config("all").pii == RedactPolicy.from_config("pii").pii
    with pytest.raises(ConfigError, match=r"redact.pii: unknown kind\(s\) \['name'\]"):
        RedactPolicy.from_config({"pii": ["name"]})
    with pytest.raises(ConfigError, match="pii_threshold"):
        RedactPolicy.from_config({"pii": True, "pii_threshold": 2})


def test_structured_content_is_masked_along_its_json_path() -> None:
    result = {"content": [], "structuredContent": {"owner": {"mail": "bo@example.org"}}}
    out, records = redact_result(result, RedactPolicy.from_config("pii"))
    assert out["structuredContent"] == {"owner": {"mail": "[REDACTED:email]"}}
    assert [(r.kind, r.where) for r in records] == [("email", "structuredContent.owner.mail")]


@pytest.mark.parametrize("transport", ("stdio", "http"))
def test_personal_data_a_server_returns_is_masked_and_recorded(transport: str, mcp_model: GuardModel,
                                                              tmp_path: Path) -> None:
    audit = tmp_path / "audit.sqlite"

    async def scenario() -> str:
        async with client_of(transport, mcp_model, tmp_path / "change.txt", audit, redact="all",
                             resource_kinds={"people://ann": "read_file"}) as client:
            return str((await client.read_resource("people://ann")).contents[0].text)  # type: ignore[union-attr]

    assert anyio.run(scenario) == MASKED
    recorded = rows(audit, "SELECT tool, kind, location, start FROM redactions ORDER BY id")
    assert recorded == [("resources/read:people://ann", kind, "contents[0].text", PERSON.index(at))
                        for kind, at in (("email", "ann.smith"), ("phone", "+1"), ("credit_card", "4111"))]
    assert b"ann.smith@example.com" not in audit.read_bytes() and b"4111 1111" not in audit.read_bytes()
