"""Control frames on a sidecar's inbound subject: liveness, a workflow version
to load, a failure policy to apply; each with its answer."""

from __future__ import annotations

from ._delivery import Claim
from ._format import _Frame
from ._sessions import FailurePolicy


class Ping(_Frame, tag=True, kw_only=True):
    """hub -> sidecar on its inbound subject: a liveness probe, answered by Pong.

    It travels the same subject and the same delivery loop as MailInbound, so
    a sidecar whose delivery is wedged stays silent to it. A sidecar older
    than this frame answers ``Ack refused decode_error``: alive all the same.
    """

    session_id: str = ""


class Pong(_Frame, tag=True, kw_only=True):
    """sidecar -> hub, the answer to a Ping, from the delivery loop."""

    deployment_id: str = ""


class LoadVersion(_Frame, tag=True, kw_only=True):
    """hub -> sidecar on its inbound subject, answered by VersionLoaded: load
    ``version`` (its sources fetched by the ``code`` claim check) and say
    whether it imports and has its entrypoint, before the hub makes it active."""

    session_id: str = ""
    version: int
    code: Claim


class VersionLoaded(_Frame, tag=True, kw_only=True):
    """``error`` is empty when the version loaded and is kept, else why not."""

    deployment_id: str = ""
    version: int
    error: str = ""


class SetPolicy(_Frame, tag=True, kw_only=True):
    """hub -> sidecar on its inbound subject, answered by PolicySet: the
    deployment's failure policy changed (``PATCH``); it applies from the
    next handler call on."""

    session_id: str = ""
    policy: FailurePolicy


class PolicySet(_Frame, tag=True, kw_only=True):
    """sidecar -> hub, the answer to a SetPolicy: the policy is in force."""

    deployment_id: str = ""
