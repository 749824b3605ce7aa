"""The hub's exceptions: one root (HubError), one subclass per failure, one
module per audience.

Each error that reaches an HTTP client carries its HTTP status and a stable
snake_case ``reason``; the HTTP layer renders ``{"status", "reason", "detail"}``
from these and nothing else, and answers a rejected receipt (which carries
only its reason) with the status of the class :func:`error_for` names. A
reason that also travels on the wire is a member of runtime.Reason.

Who reads them decides where they live: ``base`` (the root), ``store`` (a
transaction that could not commit, the acceptor closing, migrations),
``requests`` (what a client of HTTP, SMTP or the NATS ingress is refused
with), ``wire`` (a sidecar's frame refused), ``processes`` (the operator's:
the admin token, NATS identities and server, ``up``, ``demo``, the relay,
the SMTP ingress's settings) and ``clients`` (the hub's client libraries).
Every class is re-exported here: ``from .._errors import X`` is the way in.
The tree, in that order (HTTP status, a second base in parentheses)::

    runtime.MailrunError
      HubError                  500 internal_error
        StoreUnavailable        503
        StoreConflict           409
        HubShuttingDown         503
        AcceptFailed            500
        MigrationError          500
        TooManyStreams          503
        InvalidName             422
        InvalidDeployment       422
        InvalidMail             422
        InvalidSignal           422
        InvalidRequest          422
        MalformedJson           400
        Unauthorized            401
        BodyTimeout             408
        UnsupportedMediaType    415
        PayloadTooLarge         413
        NameTaken               409
        CatchAllTaken           409
        ApprovalDecided         409
        DeploymentNotLive       409
        WorkflowRunTerminal     409
        MessageIdReused         409
        UnknownDeployment       404
        UnknownRun              404
        RunNotStarted           409
        UnknownVersion          404
        VersionRefused          422
        InvalidPolicy           422
        BadSchedule             422
        UnknownSchedule         404
        RunNotSuspended         409
        DispatchNotParked       409
        UnknownDispatch         404
        UnknownApproval         404
        UnknownAddress          404
        UnknownProducer         404
        NothingToReplay         409
        ReplayFailed            422
        InvalidMailSettings     422
        SenderNotAllowed        403
        CatchAllTaken           409
        UnknownSession          a sidecar's frame: say hello again
          LeaseLost             another hub serves the deployment now
        StaleEpoch              a sidecar's frame: fenced
        AdminTokenUnavailable   the hub's or the CLI's admin token file
        NatsIdentityError       a NATS identity (nkey seed) that cannot be read or made
        NatsServerError         the embedded nats-server (hub.up)
          NatsServerNotFound
          NatsServerStartTimeout (TimeoutError)
        UpError                 ``mailrun up``
          UpAlreadyRunning
          NoFreePort            every port of --ports is taken
          NatsNotReady (TimeoutError)
          HubNotReady (TimeoutError)
        ListenerError           the hub's HTTP and SMTP listening sockets (hub._listeners)
          PortInUse             another process listens on --http or --smtp
          ListenerUnusable      --http-fd or --smtp-fd is not a listening TCP socket
        DemoFailed              ``mailrun demo``
          DemoTimeout (TimeoutError)
        RelayError              the outbound SMTP relay (hub.outbound)
          RelayConfigError      --smtp-relay and its environment do not make sense
          RelayUnavailable      not reached, a 4xx answer, TLS or login refused: try later
          RelayRefused          a 5xx answer to one mail: it is not sent again
          DkimKeyError          --dkim-key and --dkim-selector cannot sign as given
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

from .base import HubError as HubError
from .clients import HubBadResponse as HubBadResponse
from .clients import HubClientError as HubClientError
from .clients import HubResponseError as HubResponseError
from .clients import HubTimeout as HubTimeout
from .clients import HubUnreachable as HubUnreachable
from .clients import IngressError as IngressError
from .clients import IngressRefused as IngressRefused
from .clients import IngressUnavailable as IngressUnavailable
from .processes import AdminTokenUnavailable as AdminTokenUnavailable
from .processes import DemoFailed as DemoFailed
from .processes import DemoTimeout as DemoTimeout
from .processes import DkimKeyError as DkimKeyError
from .processes import HubNotReady as HubNotReady
from .processes import ListenerError as ListenerError
from .processes import ListenerUnusable as ListenerUnusable
from .processes import NatsIdentityError as NatsIdentityError
from .processes import NatsNotReady as NatsNotReady
from .processes import NatsServerError as NatsServerError
from .processes import NatsServerNotFound as NatsServerNotFound
from .processes import NatsServerStartTimeout as NatsServerStartTimeout
from .processes import NoFreePort as NoFreePort
from .processes import PortInUse as PortInUse
from .processes import RelayConfigError as RelayConfigError
from .processes import RelayError as RelayError
from .processes import RelayRefused as RelayRefused
from .processes import RelayUnavailable as RelayUnavailable
from .processes import SmtpConfigError as SmtpConfigError
from .processes import SmtpError as SmtpError
from .processes import UpAlreadyRunning as UpAlreadyRunning
from .processes import UpError as UpError
from .requests import ApprovalDecided as ApprovalDecided
from .requests import BadSchedule as BadSchedule
from .requests import BodyTimeout as BodyTimeout
from .requests import CatchAllTaken as CatchAllTaken
from .requests import DeploymentNotLive as DeploymentNotLive
from .requests import DispatchNotParked as DispatchNotParked
from .requests import InvalidDeployment as InvalidDeployment
from .requests import InvalidMail as InvalidMail
from .requests import InvalidMailSettings as InvalidMailSettings
from .requests import InvalidName as InvalidName
from .requests import InvalidPolicy as InvalidPolicy
from .requests import InvalidRequest as InvalidRequest
from .requests import InvalidSignal as InvalidSignal
from .requests import MalformedJson as MalformedJson
from .requests import MessageIdReused as MessageIdReused
from .requests import NameTaken as NameTaken
from .requests import NothingToReplay as NothingToReplay
from .requests import PayloadTooLarge as PayloadTooLarge
from .requests import ReplayFailed as ReplayFailed
from .requests import RunNotStarted as RunNotStarted
from .requests import RunNotSuspended as RunNotSuspended
from .requests import SenderNotAllowed as SenderNotAllowed
from .requests import TooManyStreams as TooManyStreams
from .requests import Unauthorized as Unauthorized
from .requests import UnknownAddress as UnknownAddress
from .requests import UnknownApproval as UnknownApproval
from .requests import UnknownDeployment as UnknownDeployment
from .requests import UnknownDispatch as UnknownDispatch
from .requests import UnknownProducer as UnknownProducer
from .requests import UnknownRun as UnknownRun
from .requests import UnknownSchedule as UnknownSchedule
from .requests import UnknownVersion as UnknownVersion
from .requests import UnsupportedMediaType as UnsupportedMediaType
from .requests import VersionRefused as VersionRefused
from .requests import WorkflowRunTerminal as WorkflowRunTerminal
from .store import AcceptFailed as AcceptFailed
from .store import HubShuttingDown as HubShuttingDown
from .store import MigrationError as MigrationError
from .store import StoreConflict as StoreConflict
from .store import StoreUnavailable as StoreUnavailable
from .wire import LeaseLost as LeaseLost
from .wire import StaleEpoch as StaleEpoch
from .wire import UnknownSession as UnknownSession

__all__ = [
    "AcceptFailed",
    "AdminTokenUnavailable",
    "ApprovalDecided",
    "BadSchedule",
    "BodyTimeout",
    "CatchAllTaken",
    "DemoFailed",
    "DemoTimeout",
    "DeploymentNotLive",
    "DispatchNotParked",
    "DkimKeyError",
    "HubBadResponse",
    "HubClientError",
    "HubError",
    "HubNotReady",
    "HubResponseError",
    "HubShuttingDown",
    "HubTimeout",
    "HubUnreachable",
    "IngressError",
    "IngressRefused",
    "IngressUnavailable",
    "InvalidDeployment",
    "InvalidMail",
    "InvalidMailSettings",
    "InvalidName",
    "InvalidPolicy",
    "InvalidRequest",
    "InvalidSignal",
    "LeaseLost",
    "ListenerError",
    "ListenerUnusable",
    "MalformedJson",
    "MessageIdReused",
    "MigrationError",
    "NameTaken",
    "NatsIdentityError",
    "NatsNotReady",
    "NatsServerError",
    "NatsServerNotFound",
    "NatsServerStartTimeout",
    "NoFreePort",
    "NothingToReplay",
    "PayloadTooLarge",
    "PortInUse",
    "RelayConfigError",
    "RelayError",
    "RelayRefused",
    "RelayUnavailable",
    "ReplayFailed",
    "RunNotStarted",
    "RunNotSuspended",
    "SenderNotAllowed",
    "SmtpConfigError",
    "SmtpError",
    "StaleEpoch",
    "StoreConflict",
    "StoreUnavailable",
    "TooManyStreams",
    "Unauthorized",
    "UnknownAddress",
    "UnknownApproval",
    "UnknownDeployment",
    "UnknownDispatch",
    "UnknownProducer",
    "UnknownRun",
    "UnknownSchedule",
    "UnknownSession",
    "UnknownVersion",
    "UnsupportedMediaType",
    "UpAlreadyRunning",
    "UpError",
    "VersionRefused",
    "WorkflowRunTerminal",
    "error_for",
]


def error_for(reason: str) -> type[HubError] | None:
    """The error class of ``reason``: where a code gets its HTTP status."""
    return _BY_REASON.get(reason)


def _tree(cls: type[HubError]) -> Iterator[type[HubError]]:
    yield cls
    for sub in cls.__subclasses__():
        yield from _tree(sub)


# Classes that name a reason of their own (not one inherited from a parent);
# every module of the package is imported above, so every class is here.
_BY_REASON = {cls.reason: cls for cls in _tree(HubError) if "reason" in vars(cls)}
