"""Deployment keys: Ed25519 via ``cryptography``; text form is base64url, no padding."""

from __future__ import annotations

import base64

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ._errors import SignatureError


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise SignatureError(f"not base64url: {exc}") from exc


def generate_keypair() -> tuple[str, str]:
    """Return ``(seed, public_key)``, each base64url of 32 bytes."""
    key = Ed25519PrivateKey.generate()
    return b64url(key.private_bytes_raw()), public_key_of(b64url(key.private_bytes_raw()))


def public_key_of(seed: str) -> str:
    key = _private(seed)
    return b64url(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))


def sign(seed: str, message: bytes) -> bytes:
    return _private(seed).sign(message)


def verify(public_key: str, message: bytes, signature: bytes) -> None:
    """Raise :class:`SignatureError` unless ``signature`` is valid."""
    try:
        Ed25519PublicKey.from_public_bytes(unb64url(public_key)).verify(signature, message)
    except (InvalidSignature, ValueError) as exc:
        raise SignatureError("signature does not verify") from exc


def hello_message(nonce: str, deployment_id: str, instance_id: str) -> bytes:
    """What a sidecar signs to prove its deployment key to the hub."""
    return b"\x00".join(
        [b"mailrun-hello-v2", nonce.encode(), deployment_id.encode(), instance_id.encode()]
    )


def _private(seed: str) -> Ed25519PrivateKey:
    raw = unb64url(seed)
    if len(raw) != 32:
        raise SignatureError("a deployment key seed is 32 bytes")
    return Ed25519PrivateKey.from_private_bytes(raw)
