"""NATS identities: nkey user key pairs, and the hub's own seed file.

An nkey user is an Ed25519 key pair in NATS's encoding (a seed ``SU...``, a
public key ``U...``). The server's config holds only public keys; a client
proves its identity by signing the server's nonce with the seed (nats-py
does, given ``nkeys_seed_str``). Keys are made with the ``nkeys`` package
from 32 bytes of ``secrets``: nothing here is hand-rolled crypto.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import nkeys

from .._errors import NatsIdentityError

HUB_SEED_FILE = "nats-hub.seed"


@dataclass(frozen=True, slots=True)
class UserKey:
    seed: str  # "SU...": the secret half, held by the one who connects with it
    public: str  # "U...": what the server's config lists


def new_user_key() -> UserKey:
    """A fresh nkey user key pair."""
    seed = nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER).decode()
    return UserKey(seed, public_key(seed))


def public_key(seed: str) -> str:
    """The public key (``U...``) of a user seed; :class:`NatsIdentityError` for
    anything that is not one."""
    try:
        pair = nkeys.from_seed(bytearray(seed.strip().encode()))
        public: str = pair.public_key.decode()
    except (nkeys.NkeysError, ValueError, UnicodeError) as exc:
        raise NatsIdentityError("not an nkey user seed") from exc
    if not public.startswith("U"):
        raise NatsIdentityError("not an nkey *user* seed")
    return public


def hub_seed(state_dir: Path) -> str:
    """The hub's nkey seed, created at the first call in ``state_dir`` (0600).

    ``mailrun up`` (for the embedded server's config), the hub (to connect)
    and ``mailrun nats-config`` all call this; the first one creates the file,
    atomically, so two racing callers end up with the same key."""
    path = state_dir / HUB_SEED_FILE
    try:
        seed = path.read_text().strip()
    except FileNotFoundError:
        key = new_user_key()
        _create(path, key.seed)
        seed = path.read_text().strip()
    public_key(seed)  # a damaged file fails here, not at the server
    return seed


def _create(path: Path, seed: str) -> None:
    # Written whole under a temp name, then linked: link() fails if another
    # caller got there first, and nobody ever reads a half-written seed.
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, seed.encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.link(tmp, path)
    except FileExistsError:
        pass  # another caller's seed won; it is read back
    except OSError as exc:
        raise NatsIdentityError(f"cannot create {path}: {exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)
