"""Finding the restore record: ``--join``, ``--deployment``, or the only one there."""

from __future__ import annotations

from pathlib import Path

from runtime import (
    RecordDecodeError,
    RestoreRecord,
    SignatureError,
    is_id,
    record_path,
    write_restore_record,
)
from runtime.sidecar_contract import decode_restore_record
from runtime.wire import unb64url

from ._errors import JoinTokenError, RestoreRecordMissing


def read_join_token(token: str) -> RestoreRecord:
    """The restore record a join token carries (base64url of its JSON).

    The token is input like any other: anything but a valid record (its
    deployment id by the id grammar, since it names the directory written)
    is a :class:`JoinTokenError`."""
    try:
        record, _ = decode_restore_record(unb64url(token.strip()))
    except (SignatureError, RecordDecodeError) as exc:
        raise JoinTokenError(f"not a join token: {exc}") from exc
    return record


def join(state_dir: Path, token: str, deployment_id: str | None = None) -> RestoreRecord:
    """Write the restore record a join token carries; nothing when it is not one."""
    record = read_join_token(token)
    if deployment_id is not None and deployment_id != record.deployment_id:
        raise JoinTokenError(f"the join token is for {record.deployment_id}, not {deployment_id}")
    write_restore_record(record_path(state_dir, record.deployment_id), record)
    return record


def locate(state_dir: Path, deployment_id: str | None) -> Path:
    """The restore record to boot from, or :class:`RestoreRecordMissing`."""
    if deployment_id is not None:
        if not is_id(deployment_id, "dep"):
            raise RestoreRecordMissing(f"{deployment_id[:80]!r} is not a deployment id")
        path = record_path(state_dir, deployment_id)
        if not path.is_file():
            raise RestoreRecordMissing(f"no restore record at {path}")
        return path
    found = sorted((state_dir / "workflow-runs").glob("*/deployment.json"))
    if len(found) != 1:
        what = "no restore record" if not found else f"{len(found)} restore records"
        raise RestoreRecordMissing(
            f"{what} under {state_dir / 'workflow-runs'}; name one with --deployment"
        )
    return found[0]
