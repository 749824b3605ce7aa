"""The hub's JSON API over HTTP (httpx): ``HubClient`` for the CLI commands,
``AsyncHubClient`` for ``mailrun up`` and ``mailrun demo``.

Both speak the same endpoints (defined once, in ``_Endpoints``) and fail the
same way: an error the hub answers becomes a ``HubResponseError`` carrying
its ``{status, reason, detail}``; a hub that cannot be reached is
``HubUnreachable`` (``HubTimeout`` when it does not answer in time), so
callers can tell "the hub said no" from "no hub". Every request has the
client's timeout and, given one, the admin token (``Authorization: Bearer``).
"""

from __future__ import annotations

import abc
import base64
import urllib.parse
from collections.abc import Coroutine, Mapping
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

import httpx
import msgspec

from ._errors import HubBadResponse, HubClientError, HubResponseError, HubTimeout, HubUnreachable

JSON = dict[str, Any]
R = TypeVar("R")

_HEADERS = {"Accept": "application/json"}
MAX_WAKE_WAIT = 30.0
"""The longest ``GET /workflows/wakes`` waits, in seconds."""


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


class _Endpoints(abc.ABC, Generic[R]):
    """The API, one method per endpoint; ``R`` is what a request returns
    (the JSON itself, or a coroutine that gives it)."""

    def __init__(self, base_url: str, timeout: float, token: str | None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._token = token

    @abc.abstractmethod
    def request(self, method: str, path: str, body: object | None = None) -> R:
        """One request; the decoded JSON object of a 2xx answer, else an error."""

    def healthz(self) -> R:
        return self.request("GET", "/healthz")

    def deploy(
        self,
        name: str,
        source: str,
        entrypoint: str | None = None,
        policy: Mapping[str, object] | None = None,
        domain: str | None = None,
    ) -> R:
        """A new deployment; ``policy``: its failure policy's settings given;
        ``domain``: one of the hub's mail domains (None: its first)."""
        body: JSON = {"name": name, "source": source, **(policy or {})}
        if entrypoint:
            body["entrypoint"] = entrypoint
        if domain:
            body["domain"] = domain
        return self.request("POST", "/workflows/deployments", body)

    def set_policy(self, deployment: str, policy: Mapping[str, object]) -> R:
        """Change some of a deployment's failure policy's settings."""
        path = f"/workflows/deployments/{_quote(deployment)}"
        return self.request("PATCH", path, dict(policy))

    def resume(self, run_id: str) -> R:
        return self.request("POST", f"/runs/{_quote(run_id)}/resume")

    def cancel(self, run_id: str, reason: str | None = None, *, terminate: bool = False) -> R:
        """Cancel a run from outside: the receipt of its ``cancel`` item."""
        body: JSON = {"terminate": terminate, **({"reason": reason} if reason else {})}
        return self.request("POST", f"/runs/{_quote(run_id)}/cancel", body)

    def pause(self, deployment: str) -> R:
        return self.request("POST", f"/workflows/deployments/{_quote(deployment)}/pause")

    def unpause(self, deployment: str) -> R:
        return self.request("POST", f"/workflows/deployments/{_quote(deployment)}/unpause")

    def parked(self, deployment: str | None = None) -> R:
        params = {"status": "parked", **({"deployment": deployment} if deployment else {})}
        return self.request("GET", f"/dispatches?{urllib.parse.urlencode(params)}")

    def retry(self, dispatch_id: str) -> R:
        return self.request("POST", f"/dispatches/{_quote(dispatch_id)}/retry")

    def add_version(self, deployment: str, source: str, entrypoint: str | None = None) -> R:
        """A new version of a live deployment; the hub answers once its sidecar
        has loaded it (or after a wait within this client's timeout)."""
        body: JSON = {"source": source}
        if entrypoint:
            body["entrypoint"] = entrypoint
        path = f"/workflows/deployments/{_quote(deployment)}/versions?wait={self._wait()}"
        return self.request("POST", path, body)

    def versions(self, deployment: str) -> R:
        return self.request("GET", f"/workflows/deployments/{_quote(deployment)}/versions")

    def activate_version(self, deployment: str, version: int) -> R:
        path = (
            f"/workflows/deployments/{_quote(deployment)}/versions/{version}/activate"
            f"?wait={self._wait()}"
        )
        return self.request("POST", path)

    def _wait(self) -> int:
        # The hub answers within this, so the request does not time out first.
        return max(0, int(self.timeout) - 2)

    def deployments(self) -> R:
        return self.request("GET", "/workflows/deployments")

    def deployments_changed(self, after: int) -> R:
        """The deployments changed after a listing's ``cursor`` (0: all), with
        the next ``cursor`` and ``whole`` (true when all were listed)."""
        return self.request("GET", f"/workflows/deployments?changed_after={after}")

    def deployment(self, deployment_id: str) -> R:
        return self.request("GET", f"/workflows/deployments/{_quote(deployment_id)}")

    def delete_deployment(self, deployment_id: str) -> R:
        return self.request("DELETE", f"/workflows/deployments/{_quote(deployment_id)}")

    def send_mail(
        self,
        to: str,
        subject: str,
        body: bytes = b"",
        *,
        message_id: str | None = None,
        sender: str | None = None,
    ) -> R:
        mail: JSON = {"to": to, "subject": subject}
        try:
            mail["body"] = body.decode("utf-8")
        except UnicodeDecodeError:
            mail["body_b64"] = base64.b64encode(body).decode("ascii")
        if message_id is not None:
            mail["message_id"] = message_id
        if sender is not None:
            mail["from"] = sender
        return self.request("POST", "/mail", mail)

    def runs(self, deployment: str | None = None) -> R:
        query = f"?{urllib.parse.urlencode({'deployment': deployment})}" if deployment else ""
        return self.request("GET", f"/runs{query}")

    def run(self, run_id: str) -> R:
        return self.request("GET", f"/runs/{_quote(run_id)}")

    def outbox(self, status: str | None = None, deployment: str | None = None) -> R:
        params = {k: v for k, v in (("status", status), ("deployment", deployment)) if v}
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        return self.request("GET", f"/outbox{query}")

    def dispatch(self, dispatch_id: str) -> R:
        return self.request("GET", f"/dispatches/{_quote(dispatch_id)}")

    def signal(
        self, run_id: str, name: str, payload: object = None, *, message_id: str | None = None
    ) -> R:
        body: JSON = {"name": name, "payload": payload}
        if message_id is not None:
            body["message_id"] = message_id
        return self.request("POST", f"/runs/{_quote(run_id)}/signals", body)

    def approvals(
        self, *, run: str | None = None, deployment: str | None = None, status: str | None = None
    ) -> R:
        params = {"run": run, "deployment": deployment, "status": status}
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v})
        return self.request("GET", f"/approvals{'?' + query if query else ''}")

    def approval(self, approval_id: str) -> R:
        return self.request("GET", f"/approvals/{_quote(approval_id)}")

    def approve(self, approval_id: str, decision: str) -> R:
        return self.request("POST", f"/approvals/{_quote(approval_id)}", {"decision": decision})

    def add_producer(self, name: str) -> R:
        """A new producer of the NATS mail ingress, with its identity's seed (shown once)."""
        return self.request("POST", "/producers", {"name": name})

    def producers(self, status: str | None = None) -> R:
        query = f"?{urllib.parse.urlencode({'status': status})}" if status else ""
        return self.request("GET", f"/producers{query}")

    def remove_producer(self, producer: str) -> R:
        return self.request("DELETE", f"/producers/{_quote(producer)}")

    def add_schedule(self, deployment: str, schedule: Mapping[str, object]) -> R:
        """A new schedule of the deployment: ``every`` or ``cron`` (and ``tz``),
        with its optional ``subject`` and ``payload``."""
        return self.request(
            "POST", f"/workflows/deployments/{_quote(deployment)}/schedules", schedule
        )

    def schedules(self, deployment: str) -> R:
        return self.request("GET", f"/workflows/deployments/{_quote(deployment)}/schedules")

    def remove_schedule(self, deployment: str, schedule_id: str) -> R:
        path = f"/workflows/deployments/{_quote(deployment)}/schedules/{_quote(schedule_id)}"
        return self.request("DELETE", path)

    # -- what both clients share around the actual I/O ---------------------------

    def _http_options(self) -> dict[str, Any]:
        headers = dict(_HEADERS)
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token}"
        # urllib, which this replaces, followed redirects too (httpx drops the
        # Authorization header on a redirect to another host).
        return {
            "base_url": self.base_url,
            "timeout": self.timeout,
            "headers": headers,
            "follow_redirects": True,
        }

    @staticmethod
    def _payload(body: object | None) -> dict[str, Any]:
        if body is None:
            return {}
        return {
            "content": msgspec.json.encode(body),
            "headers": {"Content-Type": "application/json"},
        }

    def _failed(self, exc: httpx.RequestError) -> HubClientError:
        if isinstance(exc, httpx.TimeoutException):
            return HubTimeout(f"{self.base_url} did not answer within {self.timeout:g} s")
        why = str(exc) or type(exc).__name__
        if isinstance(exc, httpx.TransportError):
            return HubUnreachable(f"cannot reach the hub at {self.base_url}: {why}")
        return HubBadResponse(f"{self.base_url}: {why}")  # undecodable body, redirect loop

    def _answer(self, response: httpx.Response) -> JSON:
        code, raw = response.status_code, response.content
        try:
            value = msgspec.json.decode(raw) if raw else {}
        except msgspec.DecodeError:
            value = None
        if not response.is_success:
            if not isinstance(value, dict):
                text = raw[:200].decode("utf-8", "replace").strip()
                value = {"status": "error", "reason": f"http_{code}", "detail": text}
            raise HubResponseError(code, value)
        if not isinstance(value, dict):
            raise HubBadResponse(f"HTTP {code} from {self.base_url}: not a JSON object")
        return value


class HubClient(_Endpoints[JSON]):
    """Blocking; use it as a context manager (or ``close()`` it)."""

    def __init__(self, base_url: str, *, timeout: float = 10.0, token: str | None = None) -> None:
        super().__init__(base_url, timeout, token)
        self._http = httpx.Client(**self._http_options())

    def request(self, method: str, path: str, body: object | None = None) -> JSON:
        try:
            response = self._http.request(method, path, **self._payload(body))
        except httpx.RequestError as exc:
            raise self._failed(exc) from exc
        return self._answer(response)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncHubClient(_Endpoints[Coroutine[Any, Any, JSON]]):
    """For anyio code; use it as an async context manager (or ``aclose()`` it)."""

    def __init__(self, base_url: str, *, timeout: float = 10.0, token: str | None = None) -> None:
        super().__init__(base_url, timeout, token)
        self._http = httpx.AsyncClient(**self._http_options())

    async def request(self, method: str, path: str, body: object | None = None) -> JSON:
        try:
            response = await self._http.request(method, path, **self._payload(body))
        except httpx.RequestError as exc:
            raise self._failed(exc) from exc
        return self._answer(response)

    async def wakes(self, wait: float) -> list[str]:
        """``GET /workflows/wakes``: the asleep deployments that have work, as
        soon as there are any, within ``wait`` seconds (0 to 30; empty when
        none came). The request may take ``wait`` on top of this client's
        timeout, so the long poll never times out first."""
        return (await self.wakes_after(wait, None))[0]

    async def wakes_after(self, wait: float, cursor: str | None) -> tuple[list[str], str | None]:
        """As :meth:`wakes`, with the ``cursor`` of the answer before: names
        given already do not answer at once, only news since. Also the
        answer's cursor (None from a hub that gives none)."""
        query = {"wait": f"{min(max(wait, 0.0), MAX_WAKE_WAIT):g}"}
        if cursor is not None:
            query["cursor"] = cursor
        try:
            response = await self._http.request(
                "GET",
                f"/workflows/wakes?{urllib.parse.urlencode(query)}",
                timeout=float(query["wait"]) + self.timeout,
            )
        except httpx.RequestError as exc:
            raise self._failed(exc) from exc
        answer = self._answer(response)
        wake, after = answer.get("wake"), answer.get("cursor")
        if not isinstance(wake, list) or not all(isinstance(dep, str) for dep in wake):
            raise HubBadResponse(f"{self.base_url}: /workflows/wakes did not answer a list of ids")
        return wake, after if isinstance(after, str) else None

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
