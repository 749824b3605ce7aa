"""The operator's errors: the processes and settings around the hub (the
admin token, NATS identities, the embedded nats-server, ``mailrun up`` and
``demo``, the outbound relay, the SMTP ingress's settings)."""

from __future__ import annotations

from .base import HubError


class AdminTokenUnavailable(HubError):
    """The admin token file is missing, unreadable or holds no token."""

    reason = "admin_token_unavailable"


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


class NoFreePort(UpError):
    """Every port of the range ``up`` was given to choose from is taken."""

    reason = "no_free_port"


class NatsNotReady(UpError, TimeoutError):
    reason = "nats_not_ready"


class HubNotReady(UpError, TimeoutError):
    """The hub ``up`` started did not answer ``/healthz`` within its deadline."""

    reason = "hub_not_ready"


class ListenerError(HubError):
    """The hub's HTTP or SMTP listening socket could not be had."""

    reason = "listener_failed"


class PortInUse(ListenerError):
    """Another process listens on the address the hub was told to serve."""

    reason = "port_in_use"


class ListenerUnusable(ListenerError):
    """``--http-fd`` or ``--smtp-fd`` names no listening TCP socket."""

    reason = "listener_unusable"


class DemoFailed(HubError):
    reason = "demo_failed"


class DemoTimeout(DemoFailed, TimeoutError):
    reason = "demo_timeout"


class RelayError(HubError):
    reason = "relay_failed"


class RelayConfigError(RelayError):
    reason = "relay_config_invalid"


class RelayUnavailable(RelayError):
    """The relay did not take the mail this time; trying again may work."""

    reason = "relay_unavailable"


class RelayRefused(RelayError):
    """The relay refused the mail for good (a 5xx answer); ``answer`` is its
    reply, ``recipient`` the one it refused at RCPT ("": not a RCPT)."""

    reason = "relay_refused"

    def __init__(self, detail: str, answer: str, *, recipient: str = "") -> None:
        super().__init__(detail)
        self.answer = answer
        self.recipient = recipient


class DkimKeyError(RelayError):
    """``--dkim-key`` and ``--dkim-selector`` cannot sign as given: a key file
    that cannot be read, is not an RSA private key, or has no selector."""

    reason = "dkim_key_invalid"


class SmtpError(HubError):
    reason = "smtp_failed"


class SmtpConfigError(SmtpError):
    """``--smtp`` cannot start as given: a bad address, a certificate that
    does not load, or a bind that others can reach without a login."""

    reason = "smtp_config_invalid"
