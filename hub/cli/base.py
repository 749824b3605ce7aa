"""What every CLI command that talks to a hub shares: ``--hub URL`` (env
``MAILRUN_HUB``), ``--token-file F`` and ``--json``, a client holding the
admin token it finds (``hub._token.find_token``), and one error contract:
``error: <reason>: <detail>`` on stderr and exit 1, exit 2 without a hub.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import msgspec

from runtime.config import DEFAULT_HUB_URL, HUB_URL_ENV

from .._errors import AdminTokenUnavailable, HubBadResponse, HubResponseError, HubUnreachable
from .._token import DEFAULT_STATE_DIR, TOKEN_ENV, admin_token_path, find_token

F = TypeVar("F", bound=Callable[..., Any])

EXIT_ERROR = 1
EXIT_UNREACHABLE = 2


def echo_json(value: object) -> None:
    click.echo(msgspec.json.encode(value).decode())


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


@contextlib.contextmanager
def reporting(as_json: bool) -> Iterator[None]:
    """Turn the client's errors into the CLI's contract: a line on stderr (or the
    hub's JSON body on stdout with ``--json``) and exit 1; exit 2 without a hub."""
    try:
        yield
    except HubResponseError as exc:
        if as_json:
            echo_json(exc.body)
            sys.exit(EXIT_ERROR)
        if exc.http_status == 401:
            where = admin_token_path(DEFAULT_STATE_DIR)
            hint = f"the CLI sends the token of --token-file F, else ${TOKEN_ENV}, else {where}"
            fail(f"{exc.reason}: {exc.detail} ({hint})")
        fail(f"{exc.reason}: {exc.detail}" if exc.detail else exc.reason)
    except HubUnreachable as exc:
        hint = f"is `mailrun up` running? set --hub or {HUB_URL_ENV}"
        fail(f"{exc.detail} ({hint})", EXIT_UNREACHABLE)
    except (HubBadResponse, AdminTokenUnavailable) as exc:
        fail(f"{exc.reason}: {exc.detail}")


def hub_options(fn: F) -> F:
    """``--hub``, ``--token-file`` and ``--json``: every command that talks to a hub has them."""
    fn = click.option("--json", "as_json", is_flag=True, help="Print the hub's JSON as is.")(fn)
    fn = click.option(
        "--token-file",
        type=click.Path(dir_okay=False, path_type=Path),
        help=f"The hub's admin token; else env {TOKEN_ENV}, else"
        f" {admin_token_path(DEFAULT_STATE_DIR)} if it exists.",
    )(fn)
    return click.option(
        "--hub",
        "hub_url",
        envvar=HUB_URL_ENV,
        default=DEFAULT_HUB_URL,
        show_default=True,
        help=f"The hub's base URL (env {HUB_URL_ENV}).",
    )(fn)


def hub_command(fn: F) -> F:
    """:func:`hub_options`, a client on the hub, and the CLI's error contract."""

    @hub_options
    @functools.wraps(fn)
    def wrapper(
        *args: Any, hub_url: str, token_file: Path | None, as_json: bool, **kwargs: Any
    ) -> Any:
        from .._client import HubClient  # httpx: only the commands that talk to a hub

        with reporting(as_json):
            token = find_token(token_file, os.environ)
            with HubClient(hub_url, token=token) as client:
                return fn(*args, client=client, as_json=as_json, **kwargs)

    return wrapper  # type: ignore[return-value]
