"""``mailrun watch``: follow the hub's live events (``GET /events``).

One readable line per change (``--json``: each event's JSON), for as long
as it runs. A dropped connection, a hub that restarts or is not up yet, and
a full hub (503) are waited out with backoff, and the stream resumes with
``Last-Event-ID``, so nothing the hub still holds is missed or shown twice.
Only an answer that will not change by waiting ends it: a refused token
(exit 1, with the same hint as every command), an unknown deployment.
"""

from __future__ import annotations

import datetime
import os
import sys
import time
import urllib.parse
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import msgspec

from runtime import Backoff, Retry

from ..._errors import HubResponseError, HubUnreachable
from ..._token import find_token
from ..base import hub_options, reporting

if TYPE_CHECKING:
    import httpx

RECONNECT = Backoff(initial=0.2, maximum=5.0)
READ_TIMEOUT = 45.0
"""Three of the hub's keep-alive pings: past it, the connection is dead."""
_RETRIED = frozenset({500, 502, 503, 504})


@dataclass
class Event:
    kind: str = "message"
    id: int | None = None
    data: list[str] = field(default_factory=list)


def parse_sse(lines: Iterable[str]) -> Iterator[Event]:
    """Server-sent events from a stream's lines; a bare ``id:`` comes as an
    event without data (it moves the resume point)."""
    event = Event()
    for line in lines:
        if not line:
            if event.data or event.id is not None:
                yield event
            event = Event()
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "id" and value.isdigit():
            event.id = int(value)
        elif name == "event":
            event.kind = value
        elif name == "data":
            event.data.append(value)


def _brief(value: Any, most: int = 60) -> str:
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    return text if len(text) <= most else text[: most - 1] + "…"


def event_line(kind: str, data: dict[str, Any], names: dict[str, str]) -> str:
    """One change, for a person: time, kind, id, deployment, status, details."""
    change = data.get("change") or {}
    at = change.get("at") or data.get("updated_at") or data.get("created_at") or time.time()
    stamp = datetime.datetime.fromtimestamp(float(at)).strftime("%H:%M:%S")
    dep_id = str(data.get("deployment_id") or data.get("id") or "")
    if kind == "deployment" and data.get("name"):
        names[dep_id] = str(data["name"])
    status = change.get("status") or data.get("status") or "-"
    extra = ""
    if kind == "dispatch":
        extra = f"seq {data.get('seq')} {data.get('kind')} {_brief(data.get('subject') or '')!r}"
    elif kind == "run":
        if data.get("error"):
            extra = f"error: {_brief(data['error'])}"
        elif data.get("result") is not None:
            extra = f"result: {_brief(data['result'])}"
    elif kind == "deployment":
        extra = f"version {data.get('version')}"
    line = f"{stamp}  {kind:<10}  {data.get('id')}  {names.get(dep_id, dep_id)}  {status}"
    return f"{line}  {extra}".rstrip()


def _error_body(response: httpx.Response) -> dict[str, object]:
    try:
        value = msgspec.json.decode(response.read())
    except msgspec.DecodeError:
        value = None
    if isinstance(value, dict):
        return value
    return {"status": "error", "reason": f"http_{response.status_code}", "detail": ""}


class Watcher:
    """Follows ``/events`` on one hub, printing each event, until interrupted."""

    def __init__(
        self, hub_url: str, token: str | None, *, deployment: str | None, since: int | None,
        as_json: bool,
    ) -> None:  # fmt: skip
        # httpx here, not at the top: every `mailrun` process imports this module.
        import httpx

        headers = {"Accept": "text/event-stream"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        timeout = httpx.Timeout(10.0, read=READ_TIMEOUT)
        self._http = httpx.Client(base_url=hub_url.rstrip("/"), headers=headers, timeout=timeout)
        self._query = urllib.parse.urlencode({"deployment": deployment} if deployment else {})
        self.last_id = since
        self._as_json = as_json
        self._names: dict[str, str] = {}

    def run(self) -> None:
        import httpx

        retry, away = Retry(RECONNECT), False
        while True:
            try:
                for _ in self._stream():
                    retry.succeeded()  # it answered: the next drop starts afresh
                    away = False
            except (httpx.TransportError, HubUnreachable) as exc:
                if not away:
                    click.echo(f"watch: {exc or type(exc).__name__}; reconnecting", err=True)
                away = True
            time.sleep(retry.failed())  # a plain process, no event loop: a plain sleep

    def _stream(self) -> Iterator[None]:
        headers = {} if self.last_id is None else {"Last-Event-ID": str(self.last_id)}
        path = f"/events?{self._query}" if self._query else "/events"
        with self._http.stream("GET", path, headers=headers) as response:
            if response.status_code != 200:
                body = _error_body(response)
                if response.status_code in _RETRIED:
                    why = f"{response.status_code} {body.get('reason')}"
                    raise HubUnreachable(f"the hub answered {why}")
                raise HubResponseError(response.status_code, body)
            self._learn_names()
            yield
            for event in parse_sse(response.iter_lines()):
                if event.id is not None:
                    self.last_id = event.id
                if event.data:
                    self._show(event)
                yield

    def _learn_names(self) -> None:
        """Deployment names for the lines (deployment events add later ones)."""
        if self._as_json:
            return
        import httpx

        try:
            listing = self._http.get("/workflows/deployments").json()
            for dep in listing.get("deployments") or []:
                self._names[str(dep["id"])] = str(dep["name"])
        except (httpx.HTTPError, ValueError, KeyError, AttributeError, TypeError):
            pass  # ids instead of names: the stream matters more

    def _show(self, event: Event) -> None:
        data = msgspec.json.decode("\n".join(event.data))
        if self._as_json:
            click.echo(msgspec.json.encode({"id": event.id, "event": event.kind, "data": data}))
        elif event.kind == "reset":
            click.echo(
                f"watch: the hub no longer holds some changes after {data.get('since')};"
                " going on from the oldest it holds",
                err=True,
            )
        elif isinstance(data, dict):
            click.echo(event_line(event.kind, data, self._names))
        sys.stdout.flush()


@click.command()
@click.option("--deployment", help="Only this deployment's changes (id or name).")
@click.option(
    "--since",
    type=click.IntRange(min=0),
    help="Start after this change id (0: all the hub holds); default: from now on.",
)
@hub_options
def watch(
    deployment: str | None, since: int | None, hub_url: str, token_file: Path | None, as_json: bool
) -> None:
    """Follow dispatches, runs and deployments as they change (GET /events), until Ctrl-C."""
    with reporting(as_json):
        token = find_token(token_file, os.environ)
        watcher = Watcher(hub_url, token, deployment=deployment, since=since, as_json=as_json)
        try:
            watcher.run()
        except KeyboardInterrupt:
            sys.exit(130)
