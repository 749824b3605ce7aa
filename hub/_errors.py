"""The hub's exceptions: one root (HubError), one subclass per failure.

Each error that reaches an HTTP client carries its HTTP status and a stable
snake_case ``reason``; the HTTP layer renders ``{"status", "reason", "detail"}``
from these and nothing else, and answers a rejected receipt (which carries
only its reason) with the status of the class :func:`error_for` names. A
reason that also travels on the wire is a member of runtime.Reason. The tree
(HTTP status, a second base in parentheses)::

    runtime.MailrunError
      HubError                  500 internal_error
        StoreUnavailable        503
        StoreConflict           409
        HubShuttingDown         503
        TooManyStreams          503
        AcceptFailed            500
        MigrationError          500
        InvalidName             422
        InvalidDeployment       422
        VersionRefused          422
        InvalidMail             422
        InvalidSignal           422
        InvalidRequest          422
        ReplayFailed            422
        MalformedJson           400
        Unauthorized            401
        BodyTimeout             408
        PayloadTooLarge         413
        UnsupportedMediaType    415
        NameTaken               409
        ApprovalDecided         409
        DeploymentNotLive       409
        WorkflowRunTerminal     409
        RunNotStarted           409
        MessageIdReused         409
        NothingToReplay         409
        UnknownDeployment       404
        UnknownRun              404
        UnknownDispatch         404
        UnknownVersion          404
        UnknownApproval         404
        UnknownAddress          404
        UnknownProducer         404
        AdminTokenUnavailable   the hub's or the CLI's admin token file
        UnknownSession          a sidecar's frame: say hello again
          LeaseLost             another hub serves the deployment now
        StaleEpoch              a sidecar's frame: fenced
        NatsIdentityError       a NATS identity (nkey seed) that cannot be read or made
        NatsServerError         the embedded nats-server (hub.up)
          NatsServerNotFound
          NatsServerStartTimeout (TimeoutError)
        UpError                 ``mailrun up``
          UpAlreadyRunning
          NatsNotReady (TimeoutError)
          HubNotReady (TimeoutError)
        DemoFailed              ``mailrun demo``
          DemoTimeout (TimeoutError)
        RelayError              the outbound SMTP relay (hub.outbound)
          RelayConfigError      --smtp-relay and its environment do not make sense
          RelayUnavailable      not reached, a 4xx answer, TLS or login refused: try later
          RelayRefused          a 5xx answer to one mail: it is not sent again
        SmtpError               the SMTP ingress (hub.smtp)
          SmtpConfigError       --smtp, its certificate and its login do not make sense
        HubClientError          the client of the hub's HTTP API (hub._client)
          HubUnreachable
            HubTimeout (TimeoutError)
          HubBadResponse
          HubResponseError      the hub's own error answer, as it came
        IngressError            the producers' client of the NATS mail ingress (hub.IngressClient)
          IngressUnavailable    no answer: no hub serving, not connected, timed out
          IngressRefused        the hub refused the request whole (a Refused frame)
"""

from __future__ import annotations

from collections.abc import Iterator

from runtime import MailrunError, Reason


class HubError(MailrunError):
    """Root of every error the hub raises on purpose."""

    http_status = 500
    reason: str = Reason.INTERNAL_ERROR
    # "rejected" when the request was understood and refused by a rule,
    # "error" when it could not be processed at all.
    kind = "error"

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail or self.reason)
        self.detail = detail or self.reason


class StoreUnavailable(HubError):
    """The store could not commit (locked past busy_timeout, read-only, I/O)."""

    http_status = 503
    reason = Reason.STORE_UNAVAILABLE


class StoreConflict(HubError):
    """A write broke one of the store's constraints (a unique key, say);
    whatever database is under it."""

    http_status = 409
    reason = "store_conflict"


class HubShuttingDown(HubError):
    """The acceptor is closed: the hub is stopping."""

    http_status = 503
    reason = "shutting_down"


class TooManyStreams(HubError):
    """``GET /events``: as many streams are open as the hub serves at once."""

    http_status = 503
    reason = "too_many_streams"


class AcceptFailed(HubError):
    """One trigger of a batch could not be stored (its batch mates were)."""

    reason = "accept_failed"


class MigrationError(HubError):
    """The database is in a state no migration knows how to move forward."""

    reason = "migration_failed"


class InvalidName(HubError):
    http_status = 422
    reason = "invalid_name"


class InvalidDeployment(HubError):
    http_status = 422
    reason = "invalid_deployment"


class InvalidMail(HubError):
    http_status = 422
    reason = "invalid_mail"


class InvalidSignal(HubError):
    """A signal's name or message id is not one line of the allowed length,
    or its body is not ``{name, payload, message_id}``."""

    http_status = 422
    reason = "invalid_signal"


class InvalidRequest(HubError):
    http_status = 422
    reason = Reason.INVALID_REQUEST


class MalformedJson(HubError):
    http_status = 400
    reason = "malformed_json"


class Unauthorized(HubError):
    """No admin token, a wrong one, or the session cookie from another origin."""

    http_status = 401
    reason = "unauthorized"


class BodyTimeout(HubError):
    """The request body did not arrive within the bound: a slow client holds no task."""

    http_status = 408
    reason = "request_timeout"


class UnsupportedMediaType(HubError):
    """A request with a body that is not ``application/json``: a browser sends
    text/plain or a form cross-site without asking, JSON only after a CORS
    preflight the hub never grants."""

    http_status = 415
    reason = "unsupported_media_type"


class PayloadTooLarge(HubError):
    http_status = 413
    reason = "payload_too_large"
    kind = "rejected"


class NameTaken(HubError):
    http_status = 409
    reason = "name_taken"
    kind = "rejected"


class ApprovalDecided(HubError):
    http_status = 409
    reason = Reason.APPROVAL_DECIDED
    kind = "rejected"


class DeploymentNotLive(HubError):
    """The deployment is deleted: it takes no more triggers."""

    http_status = 409
    reason = Reason.DEPLOYMENT_NOT_LIVE
    kind = "rejected"


class WorkflowRunTerminal(HubError):
    """The run has ended: it takes no more triggers."""

    http_status = 409
    reason = Reason.WORKFLOW_RUN_TERMINAL
    kind = "rejected"


class MessageIdReused(HubError):
    """The message id was accepted before with other content: not a retry.

    Fail closed: answering it with the first receipt would tell the sender
    that content the hub never stored was accepted."""

    http_status = 409
    reason = Reason.MESSAGE_ID_REUSED
    kind = "rejected"


class UnknownDeployment(HubError):
    http_status = 404
    reason = Reason.UNKNOWN_DEPLOYMENT


class UnknownRun(HubError):
    http_status = 404
    reason = Reason.UNKNOWN_RUN


class RunNotStarted(HubError):
    """A child run minted for a spawn whose item has not committed yet: its
    ``start`` item must be its first, so it takes nothing before that (and
    nothing ever, if that item never commits)."""

    http_status = 409
    reason = Reason.RUN_NOT_STARTED
    kind = "rejected"


class UnknownVersion(HubError):
    http_status = 404
    reason = Reason.UNKNOWN_VERSION


class VersionRefused(HubError):
    """The deployment's sidecar could not load the version (it does not
    import, or lacks its entrypoint): it was not made active."""

    http_status = 422
    reason = Reason.VERSION_REFUSED
    kind = "rejected"


class UnknownDispatch(HubError):
    http_status = 404
    reason = "unknown_dispatch"


class UnknownApproval(HubError):
    http_status = 404
    reason = Reason.UNKNOWN_APPROVAL


class UnknownAddress(HubError):
    """No deployment, live or deleted, has the mail's address."""

    http_status = 404
    reason = Reason.UNKNOWN_ADDRESS


class UnknownProducer(HubError):
    """No producer has that id or name, or (on the NATS ingress) the
    producer of that subject was removed."""

    http_status = 404
    reason = Reason.UNKNOWN_PRODUCER


class NothingToReplay(HubError):
    """The store holds no item of the run that replay could call a handler
    with (none processed yet, or its history was trimmed)."""

    http_status = 409
    reason = Reason.NOTHING_TO_REPLAY
    kind = "rejected"


class ReplayFailed(HubError):
    """The replay's scratch process could not run the code (it does not load,
    migrate_state failed) or crashed; ``detail`` says why."""

    http_status = 422
    reason = Reason.REPLAY_FAILED


class AdminTokenUnavailable(HubError):
    """The admin token file is missing, unreadable or holds no token."""

    reason = "admin_token_unavailable"


# --- the wire: a sidecar's frame is refused with the reason ------------------


class UnknownSession(HubError):
    """The frame names a session this hub never opened (or forgot): re-hello."""

    reason = Reason.UNKNOWN_SESSION


class StaleEpoch(HubError):
    """The frame's owner epoch is not the deployment's current one: fenced."""

    reason = Reason.STALE_EPOCH


class LeaseLost(UnknownSession):
    """This hub no longer serves the deployment (several hubs: another holds
    its lease, or none does yet). Nothing was written; to the sidecar it is
    an unknown session, so it says hello again and reaches the holder."""


# --- processes: the embedded nats-server, ``mailrun up`` and ``demo`` -------


class NatsIdentityError(HubError):
    """A NATS identity (an nkey seed) that cannot be read or made."""

    reason = "nats_identity_invalid"


class NatsServerError(HubError):
    """The embedded nats-server could not be started or stopped."""

    reason = "nats_server_failed"


class NatsServerNotFound(NatsServerError):
    """No nats-server binary beside this Python nor on PATH."""

    reason = "nats_server_not_found"


class NatsServerStartTimeout(NatsServerError, TimeoutError):
    """nats-server did not accept connections within its start timeout."""

    reason = "nats_server_start_timeout"


class UpError(HubError):
    reason = "up_failed"


class UpAlreadyRunning(UpError):
    reason = "up_already_running"


class NatsNotReady(UpError, TimeoutError):
    reason = "nats_not_ready"


class HubNotReady(UpError, TimeoutError):
    """The hub ``up`` started did not answer ``/healthz`` within its deadline."""

    reason = "hub_not_ready"


class DemoFailed(HubError):
    reason = "demo_failed"


class DemoTimeout(DemoFailed, TimeoutError):
    reason = "demo_timeout"


# --- the outbound relay --------------------------------------------------


class RelayError(HubError):
    reason = "relay_failed"


class RelayConfigError(RelayError):
    reason = "relay_config_invalid"


class RelayUnavailable(RelayError):
    """The relay did not take the mail this time; trying again may work."""

    reason = "relay_unavailable"


class RelayRefused(RelayError):
    """The relay refused the mail for good (a 5xx answer); ``answer`` is its reply."""

    reason = "relay_refused"

    def __init__(self, detail: str, answer: str) -> None:
        super().__init__(detail)
        self.answer = answer


# --- the SMTP ingress ----------------------------------------------------


class SmtpError(HubError):
    reason = "smtp_failed"


class SmtpConfigError(SmtpError):
    """``--smtp`` cannot start as given: a bad address, a certificate that
    does not load, or a bind that others can reach without a login."""

    reason = "smtp_config_invalid"


# --- the client of the hub's HTTP API: the CLI, ``up`` and ``demo`` --------


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

    def __init__(self, http_status: int, body: dict[str, object]) -> None:
        reason = str(body.get("reason") or f"http_{http_status}")
        detail = str(body.get("detail") or "")
        super().__init__(detail or reason)
        self.http_status = http_status
        self.reason = reason
        self.detail = detail
        self.status = str(body.get("status") or "error")
        self.body = body


# --- the producers' client of the NATS mail ingress ----------------------


class IngressError(HubError):
    """Root of the ingress client's errors."""

    reason = "ingress_error"


class IngressUnavailable(IngressError):
    """The request got no answer (no hub serves the ingress, the connection
    is down, or the answer did not come in time): whether it was accepted is
    unknown, so send it again, with its message ids."""

    reason = "ingress_unavailable"


class IngressRefused(IngressError):
    """The hub refused the whole request; ``reason`` is its code as it came."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail or reason)
        self.reason = reason
        self.detail = detail or reason


def error_for(reason: str) -> type[HubError] | None:
    """The error class of ``reason``: where a code gets its HTTP status."""
    return _BY_REASON.get(reason)


def _tree(cls: type[HubError]) -> Iterator[type[HubError]]:
    yield cls
    for sub in cls.__subclasses__():
        yield from _tree(sub)


# Classes that name a reason of their own (not one inherited from a parent).
_BY_REASON = {cls.reason: cls for cls in _tree(HubError) if "reason" in vars(cls)}
