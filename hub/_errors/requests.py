"""What the clients of the hub's doors are answered: a request refused by a
rule or not understood, with the HTTP status and ``reason`` it gets (HTTP,
SMTP and the NATS ingress give the same reasons)."""

from __future__ import annotations

from runtime import Reason

from .base import HubError


class TooManyStreams(HubError):
    """``GET /events``: as many streams are open as the hub serves at once."""

    http_status = 503
    reason = "too_many_streams"


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


class CatchAllTaken(HubError):
    """Another live deployment already takes its domain's unknown addresses:
    a domain has one catch-all at a time."""

    http_status = 409
    reason = "catch_all_taken"
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


class InvalidPolicy(HubError):
    """A failure policy that is not one: an unknown ``on_failure``, or a
    retry setting out of its range. Nothing was changed."""

    http_status = 422
    reason = Reason.INVALID_POLICY


class BadSchedule(HubError):
    """A schedule that cannot fire (``runtime.schedules.ScheduleSpec.check``),
    or whose subject or payload is refused. Nothing was stored."""

    http_status = 422
    reason = Reason.INVALID_SCHEDULE


class UnknownSchedule(HubError):
    """The deployment has no schedule of that id."""

    http_status = 404
    reason = Reason.UNKNOWN_SCHEDULE


class RunNotSuspended(HubError):
    """A resume of a run that is not suspended."""

    http_status = 409
    reason = Reason.RUN_NOT_SUSPENDED
    kind = "rejected"


class DispatchNotParked(HubError):
    """A retry of a dispatch that is not parked."""

    http_status = 409
    reason = Reason.DISPATCH_NOT_PARKED
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


class InvalidMailSettings(HubError):
    """A deployment's ``mail`` settings that cannot be kept: a sender pattern
    that is not one (no ``@``, spaces, too long, too many), or a
    ``replies_to_ended`` that is not ``top_level`` or ``refuse``."""

    http_status = 422
    reason = "invalid_mail_settings"


class SenderNotAllowed(HubError):
    """The deployment does not take mail from this sender: it matches one of
    its ``deny_from`` patterns, or none of its ``allow_from`` ones (SMTP:
    ``550 5.7.1``). Nothing is stored."""

    http_status = 403
    reason = "sender_not_allowed"
    kind = "rejected"
