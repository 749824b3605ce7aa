"""DKIM key files: read one (an RSA private key, PEM), make one, and the DNS
TXT record that publishes its public half (``mailrun dkim-record``).

Keys are read and made with ``cryptography``; signing is dkimpy's
(``_dkim.py``), which is handed the key as PKCS#1 PEM whatever form the
file had (PKCS#1 or PKCS#8, unencrypted).
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Final

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from .._errors import DkimKeyError

NEW_KEY_BITS: Final = 2048
MIN_KEY_BITS: Final = 1024
"""Receivers ignore signatures by shorter keys (RFC 8301); dkimpy too."""
TXT_STRING: Final = 255
"""The longest character-string a TXT record holds: longer values are split."""


def read_key(path: Path) -> bytes:
    """The RSA private key in ``path`` as PKCS#1 PEM, for dkimpy; raises
    :class:`DkimKeyError` saying what is wrong with the file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DkimKeyError(f"--dkim-key {path}: {exc.strerror or exc}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise DkimKeyError(f"--dkim-key {path}: the key is encrypted") from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise DkimKeyError(f"--dkim-key {path}: not a PEM private key ({exc})") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise DkimKeyError(f"--dkim-key {path}: not an RSA key")
    if key.key_size < MIN_KEY_BITS:
        raise DkimKeyError(f"--dkim-key {path}: {key.key_size} bits; at least {MIN_KEY_BITS}")
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def generate_key(path: Path) -> bool:
    """Write a new 2048-bit RSA key to ``path`` (mode 0600) unless the file
    exists; True when it wrote one. Never replaces a file."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=NEW_KEY_BITS)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    except OSError as exc:
        raise DkimKeyError(f"--dkim-key {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "wb") as file:
        file.write(pem)
        file.flush()
        os.fsync(file.fileno())
    return True


def public_value(pem: bytes) -> str:
    """The TXT record's value for the key ``pem``: ``v=DKIM1; k=rsa; p=...``
    (``p``: the public key, SubjectPublicKeyInfo DER in base64)."""
    key = serialization.load_pem_private_key(pem, password=None)
    der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return f"v=DKIM1; k=rsa; p={base64.b64encode(der).decode('ascii')}"


def dns_record(pem: bytes, selector: str, domain: str) -> str:
    """The record to publish, in zone-file form: ``S._domainkey.D. IN TXT
    "..." "..."``, the value split in strings of at most 255 bytes."""
    value = public_value(pem)
    strings = [value[i : i + TXT_STRING] for i in range(0, len(value), TXT_STRING)]
    quoted = " ".join(f'"{s}"' for s in strings)
    return f"{selector}._domainkey.{domain.rstrip('.').lower()}. IN TXT {quoted}"
