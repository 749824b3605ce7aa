"""The admin token (docs/design.md section 9): its file in a state dir, and how the CLI finds it.

The hub creates ``<state-dir>/admin-token`` (0600) at its first start and
keeps it for good; ``mailrun up`` reads the same file to poll its hub and to
print the console URL. The CLI sends the token it finds first: the file given
by ``--token-file``, else ``MAILRUN_TOKEN``, else the file of the default
state dir (``mailrun-state`` under the current directory).
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path

from ._errors import AdminTokenUnavailable

ADMIN_TOKEN_FILE = "admin-token"
TOKEN_ENV = "MAILRUN_TOKEN"
DEFAULT_STATE_DIR = Path("mailrun-state")

# It travels in an Authorization header and a cookie: RFC 6750's token68
# characters only (never a CR or LF), and long enough not to be guessed.
_TOKEN = re.compile(r"[A-Za-z0-9._~+/-]{16,512}=*")


def admin_token_path(state_dir: Path) -> Path:
    return state_dir / ADMIN_TOKEN_FILE


def check_token(token: str, source: str) -> str:
    """``token`` without surrounding whitespace, if it can be an admin token."""
    token = token.strip()
    if not _TOKEN.fullmatch(token):
        raise AdminTokenUnavailable(
            f"{source} does not hold a token: 16 to 512 of A-Z a-z 0-9 . _ ~ + / -"
        )
    return token


def read_token_file(path: Path) -> str:
    """The token in ``path``; ``AdminTokenUnavailable`` if it is missing, unreadable or empty."""
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise AdminTokenUnavailable(f"cannot read the admin token file {path}: {exc}") from exc
    return check_token(text, f"the admin token file {path}")


def ensure_admin_token(state_dir: Path) -> tuple[str, bool]:
    """The state dir's token, created (0600) if it has none; and whether it was created."""
    path = admin_token_path(state_dir)
    if path.exists():
        return read_token_file(path), False
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, (secrets.token_urlsafe(32) + "\n").encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        # A link never replaces: of two processes creating it at once (``up``
        # and its hub, say), one wins and both use the winner's token.
        os.link(tmp, path)
        created = True
    except FileExistsError:
        created = False
    except OSError as exc:
        raise AdminTokenUnavailable(f"cannot create the admin token file {path}: {exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)
    return read_token_file(path), created


def find_token(token_file: Path | None, environ: Mapping[str, str]) -> str | None:
    """The token the CLI sends; None when none is to be found (the hub then says 401)."""
    if token_file is not None:
        return read_token_file(token_file)
    if environ.get(TOKEN_ENV):
        return check_token(environ[TOKEN_ENV], TOKEN_ENV)
    default = admin_token_path(DEFAULT_STATE_DIR)
    return read_token_file(default) if default.exists() else None
