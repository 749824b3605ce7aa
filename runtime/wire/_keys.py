"""Deployment keys: Ed25519; text form is base64url, no padding.

Ed25519 through PyNaCl (libsodium), which NATS identities load anyway
(nats-py signs the server's nonce with ``nkeys``, built on it).
``cryptography``'s bindings cost each idle sidecar about 7.5 MiB of RSS for
the one signature it makes per connect (docs/performance.md).
"""

from __future__ import annotations

import base64

from nacl.exceptions import CryptoError
from nacl.signing import SigningKey, VerifyKey

from ..errors import SignatureError


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise SignatureError(f"not base64url: {exc}") from exc


def generate_keypair() -> tuple[str, str]:
    """Return ``(seed, public_key)``, each base64url of 32 bytes."""
    key = SigningKey.generate()
    return b64url(bytes(key)), b64url(bytes(key.verify_key))


def public_key_of(seed: str) -> str:
    return b64url(bytes(_private(seed).verify_key))


def sign(seed: str, message: bytes) -> bytes:
    return _private(seed).sign(message).signature


def verify(public_key: str, message: bytes, signature: bytes) -> None:
    """Raise :class:`SignatureError` unless ``signature`` is valid."""
    try:
        VerifyKey(unb64url(public_key)).verify(message, signature)
    except (CryptoError, ValueError, TypeError) as exc:
        raise SignatureError("signature does not verify") from exc


def hello_message(nonce: str, deployment_id: str, instance_id: str) -> bytes:
    """What a sidecar signs to prove its deployment key to the hub."""
    return b"\x00".join(
        [b"mailrun-hello-v2", nonce.encode(), deployment_id.encode(), instance_id.encode()]
    )


def _private(seed: str) -> SigningKey:
    raw = unb64url(seed)
    if len(raw) != 32:
        raise SignatureError("a deployment key seed is 32 bytes")
    return SigningKey(raw)
