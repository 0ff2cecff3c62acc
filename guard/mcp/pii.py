"""Personal data found in a text, for ``redact:`` (the ``pii`` extra: Microsoft Presidio's analyzer).

Presidio's recognizers that need no language model — each a pattern with a checksum or a validating
library behind it — run on the text alone: e-mail addresses (the domain checked against the public
suffix list as shipped, never fetched), phone numbers (Google's ``phonenumbers``), credit-card numbers
(Luhn), IBANs (their checksum), IP addresses and US social security numbers. Names, places and
organisations need a spaCy model, which no package on the index ships with its weights; they are not
found. Loading Presidio takes seconds (it imports spaCy): :func:`preload` starts it in a thread when a
proxy is made, so that the first result waits for it only as long as it still takes.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from .._extras import require

# a kind as ``redact:`` names it → Presidio's entity and the recognizer that finds it (in Presidio's package)
KINDS: dict[str, tuple[str, str]] = {
    "email": ("EMAIL_ADDRESS", "EmailRecognizer"),
    "phone": ("PHONE_NUMBER", "PhoneRecognizer"),
    "credit_card": ("CREDIT_CARD", "CreditCardRecognizer"),
    "iban": ("IBAN_CODE", "IbanRecognizer"),
    "ip_address": ("IP_ADDRESS", "IpRecognizer"),
    "us_ssn": ("US_SSN", "UsSsnRecognizer"),
}

_lock = threading.Lock()
_loading: list[Future[dict[str, Any]]] = []  # (the one load of the process, once started)


def preload() -> None:
    """Start loading the recognizers in a thread, once per process (the extra is checked here: a missing
    one is :class:`~forewarn.guard._extras.MissingExtra` at once, not at the first result)."""
    require("pii", "redact: personal data (email, phone, ...)")
    with _lock:
        if _loading:
            return
        loading: Future[dict[str, Any]] = Future()
        _loading.append(loading)

    def load() -> None:
        try:
            loading.set_result(_load())
        except BaseException as exc:  # (handed to whoever waits on it)
            loading.set_exception(exc)
    threading.Thread(target=load, name="forewarn-pii-load", daemon=True).start()


def find(text: str, kinds: Sequence[str], threshold: float) -> list[tuple[int, int, str]]:
    """The spans of ``text`` holding personal data of ``kinds`` scored at least ``threshold``: (start, end,
    kind). Waits for the recognizers if they are still loading."""
    if not _loading:
        preload()
    recognizers = _loading[0].result()
    spans = []
    for kind in kinds:
        entity = KINDS[kind][0]
        for hit in recognizers[kind].analyze(text, [entity], None):
            if hit.score >= threshold:
                spans.append((hit.start, hit.end, kind))
    return spans


def _load() -> dict[str, Any]:
    import tldextract
    from presidio_analyzer import predefined_recognizers as found

    offline = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)  # the list as the package ships it

    class OfflineEmail(found.EmailRecognizer):
        """Presidio's own e-mail check, with a suffix list that is never fetched at run time."""

        def validate_result(self, pattern_text: str) -> bool:
            return bool(offline(pattern_text).fqdn)

    return {kind: (OfflineEmail() if kind == "email" else getattr(found, name)()) for kind, (_, name) in KINDS.items()}
