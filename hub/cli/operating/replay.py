"""``mailrun replay RUN --file F [--entrypoint M:A]``: a run's recorded items
through new code, without effects, and the first difference (docs/replay.md).

Like ``diff``, its exit status is the answer: 0 nothing differs, 1 something
does, 2 the replay could not be made (the hub refused or failed it, no hub,
an unreadable file), so its own error contract differs from the other
commands' (``commands``: 1 for a hub's refusal).
"""

from __future__ import annotations

import os
import sys
import urllib.parse
from pathlib import Path
from typing import Any, NoReturn

import click
import msgspec

from ..._errors import HubError, HubResponseError
from ..._token import find_token
from ..base import hub_options

EXIT_SAME = 0
EXIT_DIFFERS = 1
EXIT_ERROR = 2
CLIENT_TIMEOUT = 150.0
"""Seconds to wait for the hub's answer: its replay may take 120."""


def _fail(message: str, body: object | None, as_json: bool) -> NoReturn:
    if as_json and body is not None:
        click.echo(msgspec.json.encode(body).decode())
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def _json(value: Any) -> str:
    return msgspec.json.encode(value, order="sorted").decode()


def _changed_keys(recorded: Any, replayed: Any) -> list[str]:
    """The top-level keys whose values differ, when both states are objects."""
    if not (isinstance(recorded, dict) and isinstance(replayed, dict)):
        return []
    return [
        k
        for k in sorted(set(recorded) | set(replayed))
        if k not in recorded or k not in replayed or _json(recorded[k]) != _json(replayed[k])
    ]


def render(report: dict[str, Any]) -> str:
    """The report for people: what was replayed, and the first difference."""
    steps = ""
    if report.get("first_step") is not None:
        steps = f" (steps {report['first_step']}-{report['last_step']})"
    start = report.get("start")
    lines = [
        f"run {report.get('run_id')}: {report.get('replayed', 0)} item(s) replayed{steps},"
        f" starting {'at the beginning' if start == 'beginning' else start}"
    ]
    lines += [f"  note: {why}" for why in report.get("skipped") or []]
    difference = report.get("difference")
    if not report.get("differs") or not isinstance(difference, dict):
        lines.append("no difference: the new code computes what the run recorded")
        return "\n".join(lines)
    what = difference.get("what")
    lines.append(
        f"first difference at step {difference.get('step')} (seq {difference.get('seq')},"
        f" {difference.get('kind')} {difference.get('dispatch_id')}): {what}"
    )
    recorded = difference.get("recorded") or {}
    new = difference.get("replayed") or {}
    if what == "state":
        changed = _changed_keys(recorded.get("state"), new.get("state"))
        if changed:
            lines.append(f"  changed keys: {', '.join(changed)}")
    lines.append(f"  recorded: {_json(recorded)}")
    lines.append(f"  replayed: {_json(new)}")
    return "\n".join(lines)


@click.command()
@click.argument("run_id", metavar="RUN")
@click.option(
    "--file",
    "file",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The new code: one module, saved as the entrypoint's.",
)
@click.option("--entrypoint", help="module:attr (default: the run's own handler).")
@hub_options
def replay(
    run_id: str,
    file: Path,
    entrypoint: str | None,
    hub_url: str,
    token_file: Path | None,
    as_json: bool,
) -> None:
    """Re-execute RUN's recorded items against the code in FILE, without effects.

    Starts from the run's recorded state and reports the first item where the
    new code's steps, state, effects or end differ from what the run recorded.
    Sends, spawns, approvals and timers are recorded, not performed; steps
    return what the run recorded, uncalled. Only the items the hub still
    holds can be replayed (docs/replay.md). Exit 0: no difference;
    1: a difference; 2: an error."""
    try:
        source = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"cannot read {file}: {exc}", None, as_json)
    body: dict[str, Any] = {"source": source}
    if entrypoint:
        body["entrypoint"] = entrypoint
    from ..._client import HubClient  # httpx: imported by the command that uses it

    try:
        token = find_token(token_file, os.environ)
        with HubClient(hub_url, token=token, timeout=CLIENT_TIMEOUT) as client:
            path = f"/runs/{urllib.parse.quote(run_id, safe='')}/replay"
            report = client.request("POST", path, body)
    except HubResponseError as exc:
        _fail(f"{exc.reason}: {exc.detail}" if exc.detail else exc.reason, exc.body, as_json)
    except HubError as exc:  # no hub, no token, an answer that is no report
        _fail(f"{exc.reason}: {exc.detail}", None, as_json)
    if as_json:
        click.echo(msgspec.json.encode(report).decode())
    else:
        click.echo(render(report))
    sys.exit(EXIT_DIFFERS if report.get("differs") else EXIT_SAME)
