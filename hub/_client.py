"""A small synchronous HTTP client for the hub's JSON API (stdlib urllib only).

The CLI, ``mailrun up`` and ``mailrun demo`` talk to the hub through this and
nothing else. Every error the hub answers becomes a ``HubResponseError``
carrying the hub's ``{status, reason, detail}``; a hub that cannot be reached
is ``HubUnreachable`` so callers can tell "the hub said no" from "no hub".
"""

from __future__ import annotations

import base64
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import msgspec

from runtime import DEFAULT_HUB_URL, HUB_URL_ENV

from ._errors import HubError

JSON = dict[str, Any]


class HubClientError(HubError):
    """Root of the client's errors."""

    reason = "client_error"


class HubUnreachable(HubClientError):
    """No hub answered at the URL (refused, unknown host, network down)."""

    reason = "hub_unreachable"


class HubTimeout(HubUnreachable, TimeoutError):
    """The hub did not answer within the client's timeout."""

    reason = "hub_timeout"


class HubBadResponse(HubClientError):
    """The hub answered something that is not the JSON object it should be."""

    reason = "bad_response"


class HubResponseError(HubClientError):
    """The hub answered with an error status; ``body`` is its JSON as sent."""

    def __init__(self, http_status: int, body: JSON) -> None:
        reason = str(body.get("reason") or f"http_{http_status}")
        detail = str(body.get("detail") or "")
        super().__init__(detail or reason)
        self.http_status = http_status
        self.reason = reason
        self.detail = detail
        self.status = str(body.get("status") or "error")
        self.body = body


def default_hub_url() -> str:
    return os.environ.get(HUB_URL_ENV) or DEFAULT_HUB_URL


def _quote(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


class HubClient:
    def __init__(self, base_url: str | None = None, *, timeout: float = 10.0) -> None:
        self.base_url = (base_url or default_hub_url()).rstrip("/")
        self.timeout = timeout

    def request(self, method: str, path: str, body: object | None = None) -> JSON:
        """One request; the decoded JSON object of a 2xx answer, else an error."""
        data = msgspec.json.encode(body) if body is not None else None
        req = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={"Accept": "application/json"}
            | ({"Content-Type": "application/json"} if data is not None else {}),
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return self._decode(resp.status, resp.read())
        except urllib.error.HTTPError as exc:
            with exc:
                payload = self._decode(exc.code, exc.read(), lenient=True)
            raise HubResponseError(exc.code, payload) from None
        except TimeoutError as exc:
            raise HubTimeout(f"{self.base_url} did not answer within {self.timeout:g} s") from exc
        except (urllib.error.URLError, ConnectionError) as exc:
            why = getattr(exc, "reason", exc)
            raise HubUnreachable(f"cannot reach the hub at {self.base_url}: {why}") from exc

    def _decode(self, code: int, raw: bytes, *, lenient: bool = False) -> JSON:
        try:
            value = msgspec.json.decode(raw) if raw else {}
        except msgspec.DecodeError:
            value = None
        if isinstance(value, dict):
            return value
        if lenient:
            text = raw[:200].decode("utf-8", "replace").strip()
            return {"status": "error", "reason": f"http_{code}", "detail": text}
        raise HubBadResponse(f"HTTP {code} from {self.base_url}: not a JSON object")

    # -- the API, one method per endpoint -------------------------------------

    def healthz(self) -> JSON:
        return self.request("GET", "/healthz")

    def deploy(self, name: str, source: str, entrypoint: str | None = None) -> JSON:
        body: JSON = {"name": name, "source": source}
        if entrypoint:
            body["entrypoint"] = entrypoint
        return self.request("POST", "/workflows/deployments", body)

    def deployments(self) -> JSON:
        return self.request("GET", "/workflows/deployments")

    def deployment(self, deployment_id: str) -> JSON:
        return self.request("GET", f"/workflows/deployments/{_quote(deployment_id)}")

    def delete_deployment(self, deployment_id: str) -> JSON:
        return self.request("DELETE", f"/workflows/deployments/{_quote(deployment_id)}")

    def send_mail(
        self,
        to: str,
        subject: str,
        body: bytes = b"",
        *,
        message_id: str | None = None,
        sender: str | None = None,
    ) -> JSON:
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

    def runs(self, deployment: str | None = None) -> JSON:
        query = f"?{urllib.parse.urlencode({'deployment': deployment})}" if deployment else ""
        return self.request("GET", f"/runs{query}")

    def run(self, run_id: str) -> JSON:
        return self.request("GET", f"/runs/{_quote(run_id)}")

    def dispatch(self, dispatch_id: str) -> JSON:
        return self.request("GET", f"/dispatches/{_quote(dispatch_id)}")

    def approve(self, approval_id: str, decision: str) -> JSON:
        return self.request("POST", f"/approvals/{_quote(approval_id)}", {"decision": decision})
