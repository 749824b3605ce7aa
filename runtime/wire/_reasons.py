"""The wire vocabulary: every code hub and sidecar write or match on.

A code is a snake_case string on the wire, defined here once and nowhere
else. Frame fields that carry a code stay typed ``str``: a peer of another
release may send a code this one does not know, and decoding must not fail
on it. Code compares against and writes these members (a StrEnum member
equals its string), never a literal.

=============================  ===============  =====================
field                          direction        codes
=============================  ===============  =====================
``Refused.reason``             hub -> peer      :class:`Reason`
``Ack.result``                 sidecar -> hub   :class:`AckResult`
``Ack.reason``                 sidecar -> hub   :class:`Reason`
``DispatchProcessed.outcome``  sidecar -> hub   :class:`DispatchOutcome`
a rejected receipt's reason    hub -> HTTP      :class:`Reason`
=============================  ===============  =====================

``Ack.result`` is the exception: it is typed :class:`AckResult`, as strict
as the ``Literal`` it replaced (an unknown result never decoded).
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    """Why a request, a delivery or a trigger was not taken."""

    # Refused, any request to the hub.
    DECODE_ERROR = "decode_error"  # also an Ack's: the frame did not decode
    INTERNAL_ERROR = "internal_error"
    STORE_UNAVAILABLE = "store_unavailable"
    # Refused to hub.hello (unknown_deployment and deployment_not_live also
    # reject a receipt and refuse a mint).
    UNKNOWN_DEPLOYMENT = "unknown_deployment"
    DEPLOYMENT_NOT_LIVE = "deployment_not_live"
    BAD_NONCE = "bad_nonce"
    BAD_SIGNATURE = "bad_signature"
    OWNER_CONFLICT = "owner_conflict"
    OWNER_UNCONFIRMED = (
        "owner_unconfirmed"  # the hub just restarted: its owner may say hello yet; ask again
    )
    # Refused to a request naming a session: the sidecar says hello again.
    UNKNOWN_SESSION = "unknown_session"
    STALE_EPOCH = "stale_epoch"  # also an Ack's: a frame of an older owner epoch
    # Refused to hub.blob.
    UNKNOWN_BLOB = "unknown_blob"
    BAD_OFFSET = "bad_offset"
    # Refused to hub.mint (unknown_run and workflow_run_terminal also reject
    # a receipt; workflow_run_terminal is a dispatch's last_error too).
    UNKNOWN_RUN = "unknown_run"
    WORKFLOW_RUN_TERMINAL = "workflow_run_terminal"
    RUN_NOT_STARTED = "run_not_started"  # a child run whose parent's item has not committed
    PARENT_NOT_LIVE = "parent_not_live"
    INVALID_REQUEST = "invalid_request"
    # An Ack refusing a MailInbound: the sidecar did not store it.
    WRONG_DEPLOYMENT = "wrong_deployment"  # also a hello on another deployment's subject
    DIGEST_MISMATCH = "digest_mismatch"
    BLOB_REFUSED = "blob_refused"
    BLOB_UNAVAILABLE = "blob_unavailable"
    ACK_MISMATCH = "ack_mismatch"  # the hub's note: the Ack named another dispatch
    # A rejected receipt (HTTP), besides the ones above.
    UNKNOWN_ADDRESS = "unknown_address"
    UNKNOWN_APPROVAL = "unknown_approval"
    APPROVAL_DECIDED = "approval_decided"
    MESSAGE_ID_REUSED = "message_id_reused"  # the id was accepted with other content
    # Refused to a mail ingress request (NATS): no live producer has that subject.
    UNKNOWN_PRODUCER = "unknown_producer"
    # Failure handling (HTTP).
    RUN_NOT_SUSPENDED = "run_not_suspended"  # a resume of a run that is not suspended
    DISPATCH_NOT_PARKED = "dispatch_not_parked"  # a retry of a dispatch that is not parked
    INVALID_POLICY = "invalid_policy"  # an unknown on_failure, a retry setting out of range
    # Schedules (HTTP).
    INVALID_SCHEDULE = "invalid_schedule"  # neither or both of every/cron, a bad cron or zone
    UNKNOWN_SCHEDULE = "unknown_schedule"
    # Scale to zero (NATS).
    BUSY = "busy"  # a Sleep refused: a dispatch of the deployment waits for delivery
    # Workflow versions (HTTP).
    UNKNOWN_VERSION = "unknown_version"
    VERSION_REFUSED = "version_refused"  # the sidecar could not load it
    # Replay (HTTP).
    NOTHING_TO_REPLAY = "nothing_to_replay"  # the store holds no item to replay
    REPLAY_FAILED = "replay_failed"  # the scratch process could not replay


class AckResult(StrEnum):
    """What the sidecar did with a MailInbound."""

    STORED = "stored"  # committed to its inbox now
    DUPLICATE = "duplicate"  # it was there already
    REFUSED = "refused"  # not stored; ``reason`` says why


class OnFailure(StrEnum):
    """What becomes of an item whose handler failed past its retry budget
    (a deployment's ``on_failure``)."""

    SUSPEND = "suspend"  # the run is suspended, holding its items, until resumed
    PARK = "park"  # the item is set aside (parked), the run goes on
    FAIL = "fail"  # the run fails


class DispatchOutcome(StrEnum):
    """How the sidecar consumed a dispatch (``DispatchProcessed.outcome``)."""

    PROCESSED = "processed"  # the handler's call committed
    REFUSED_TERMINAL = "refused_terminal"  # the run had ended: not handled
    FAILED = "failed"  # the retry budget was spent on it: the run failed
    PARKED = "parked"  # the retry budget was spent on it: set aside, the run goes on
