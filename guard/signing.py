"""Signed model files: Ed25519 signatures over the model's canonical body.

The checksum a model file carries catches accidental corruption, but anyone can
recompute it after editing the file. A signature cannot be recomputed without the
private key: ``forewarn learn --sign KEY`` (or ``$FOREWARN_SIGNING_KEY``) adds

    "signature": {"algorithm": "ed25519", "key_id": "<sha256 of the public key, 16 hex>",
                  "signed_at": <Unix time in seconds>, "value": "<base64 of the 64-byte signature>"}

over the same canonical bytes the checksum covers (the body without ``checksum`` and
``signature``, keys sorted, orjson: every other field, known or not), followed by the signing
time: the time is signed too,
so a server can refuse to go back to an older model under a name (rollback protection,
docs/security.md). Signatures of 0.1, without ``signed_at``, cover the body alone and
count as older than any signature with a time. Whoever loads the model with trusted public keys
(``trusted_keys=``, ``forewarn check --trusted-key``, ``$FOREWARN_TRUSTED_KEYS``, the
server's ``trusted_keys``) refuses unsigned files, files signed by another key and
files changed after signing. A ``signature`` holds those four fields and no other: a field
there is covered by no signature, so one the verifier does not know is refused, not carried
along on a valid signature (an unknown field elsewhere is signed, and the loader's schema
refuses it). Keys are PEM files (``openssl genpkey -algorithm ed25519``,
or :func:`generate_keypair`).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import math
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ..errors import ModelFileError

__all__ = ["ENV_SIGNING_KEY", "ENV_TRUSTED_KEYS", "SIGNATURE_FIELDS", "SignatureError", "TrustedKey", "canonical_body",
           "generate_keypair", "load_private_key", "load_trusted_keys", "sign_document", "signing_time",
           "trusted_keys_from_env", "verify_document"]

ENV_SIGNING_KEY = "FOREWARN_SIGNING_KEY"
ENV_TRUSTED_KEYS = "FOREWARN_TRUSTED_KEYS"
ALGORITHM = "ed25519"
# the fields of a signature: the only part of a document it does not cover, so nothing else may be there
SIGNATURE_FIELDS = ("algorithm", "key_id", "signed_at", "value")
_MAX_KEY_BYTES = 64 * 1024


class SignatureError(ModelFileError):
    """A model without the signature its loader requires, or whose signature does not verify."""


@dataclass(frozen=True)
class TrustedKey:
    key_id: str
    source: str
    key: Any  # cryptography's Ed25519PublicKey


def canonical_body(document: dict[str, Any]) -> bytes:
    """The bytes the checksum and the signature cover: the body without both, keys sorted."""
    return orjson.dumps({k: v for k, v in document.items() if k not in ("checksum", "signature")},
                        option=orjson.OPT_SORT_KEYS)


def _key_id(public_key: Any) -> str:
    from cryptography.hazmat.primitives import serialization

    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def _read_pem(path: str | Path, what: str) -> bytes:
    path = Path(path)
    try:
        if path.stat().st_size > _MAX_KEY_BYTES:
            raise SignatureError(f"{path}: too large to be a {what} key file")
        return path.read_bytes()
    except OSError as exc:
        raise SignatureError(f"{path}: cannot read the {what} key: {exc.strerror}") from exc


def load_private_key(path: str | Path) -> Any:
    """An Ed25519 private key from a PEM file (unencrypted PKCS#8, as openssl writes it)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        key = serialization.load_pem_private_key(_read_pem(path, "signing"), password=None)
    except (ValueError, TypeError) as exc:
        raise SignatureError(f"{path}: not an unencrypted PEM private key: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise SignatureError(f"{path}: the signing key must be an Ed25519 key, not {type(key).__name__}")
    return key


def load_trusted_keys(paths: Iterable[str | Path]) -> tuple[TrustedKey, ...]:
    """Ed25519 public keys from PEM files (a private key file is accepted: its public half is used)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

    keys = []
    for path in paths:
        data = _read_pem(path, "public")
        try:
            if b"PRIVATE KEY" in data:
                private = serialization.load_pem_private_key(data, password=None)
                key: Any = private.public_key() if isinstance(private, Ed25519PrivateKey) else private
            else:
                key = serialization.load_pem_public_key(data)
        except (ValueError, TypeError) as exc:
            raise SignatureError(f"{path}: not a PEM public key: {exc}") from exc
        if not isinstance(key, Ed25519PublicKey):
            raise SignatureError(f"{path}: a trusted key must be an Ed25519 key, not {type(key).__name__}")
        keys.append(TrustedKey(_key_id(key), str(path), key))
    return tuple(keys)


def trusted_keys_from_env() -> tuple[TrustedKey, ...]:
    """``$FOREWARN_TRUSTED_KEYS``: public key files, comma-separated (empty: no signature required)."""
    value = os.environ.get(ENV_TRUSTED_KEYS, "")
    return load_trusted_keys(p.strip() for p in value.split(",") if p.strip())


def _message(body: bytes, signed_at: float | None) -> bytes:
    """What the signature covers: the canonical body, then the signing time (when there is one)."""
    return body if signed_at is None else body + b"\x00forewarn-signed-at:" + orjson.dumps(signed_at)


def signing_time(document: dict[str, Any]) -> float | None:
    """The ``signed_at`` of ``document``'s signature (None: unsigned, or signed without a time)."""
    signature = document.get("signature")
    value = signature.get("signed_at") if isinstance(signature, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def sign_document(document: dict[str, Any], private_key: Any, *, signed_at: float | None = None) -> dict[str, Any]:
    """``document`` with a ``signature`` over its canonical body and the signing time (now, unless
    ``signed_at`` is given); the checksum is left as it is."""
    when = round(time.time(), 6) if signed_at is None else float(signed_at)
    value = private_key.sign(_message(canonical_body(document), when))
    signed = {k: v for k, v in document.items() if k != "signature"}
    signed["signature"] = {"algorithm": ALGORITHM, "key_id": _key_id(private_key.public_key()),
                           "signed_at": when, "value": base64.b64encode(value).decode("ascii")}
    return signed


def verify_document(document: dict[str, Any], keys: Sequence[TrustedKey], *, source: str) -> str:
    """The key id that signed ``document``; raises unless one of ``keys`` did, over this very body.

    Raises:
        SignatureError: unsigned, signed by an untrusted key, or modified after signing.
    """
    from cryptography.exceptions import InvalidSignature

    signature = document.get("signature")
    trusted = ", ".join(k.key_id for k in keys)
    if not isinstance(signature, dict):
        raise SignatureError(f"{source}: the model is not signed, and only models signed by a trusted key "
                             f"({trusted}) are accepted; sign it with 'forewarn learn --sign KEY'")
    unknown = sorted(str(k) for k in signature if k not in SIGNATURE_FIELDS)
    if unknown:
        raise SignatureError(f"{source}: signature.{unknown[0]}: not a field of a signature "
                             f"({', '.join(SIGNATURE_FIELDS)}); no signature covers it, so it is refused")
    if signature.get("algorithm") != ALGORITHM:
        raise SignatureError(f"{source}: signature algorithm {signature.get('algorithm')!r} is not supported "
                             f"(only {ALGORITHM!r})")
    key_id = signature.get("key_id")
    matching = [k for k in keys if k.key_id == key_id]
    if not matching:
        raise SignatureError(f"{source}: signed by key {key_id!r}, which is not one of the trusted keys ({trusted})")
    try:
        value = base64.b64decode(str(signature.get("value", "")), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SignatureError(f"{source}: the signature is not valid base64") from exc
    signed_at = signature.get("signed_at")
    if "signed_at" in signature and signing_time(document) is None:
        raise SignatureError(f"{source}: signed_at {signed_at!r} is not a time (Unix seconds)")
    body = _message(canonical_body(document), signing_time(document))
    for key in matching:
        try:
            key.key.verify(value, body)
            return key.key_id
        except InvalidSignature:
            continue
    raise SignatureError(f"{source}: the signature does not match the model: it was modified after it was signed "
                         f"by key {key_id!r}")


def generate_keypair(private_path: str | Path, public_path: str | Path) -> str:
    """Write a new Ed25519 key pair as PEM files (the private one mode 0600); returns its key id."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    Path(public_path).write_bytes(private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return _key_id(private.public_key())
