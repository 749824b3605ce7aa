"""Finding the restore record: ``--join``, ``--deployment``, or the only one there."""

from __future__ import annotations

from pathlib import Path

from runtime import (
    RecordDecodeError,
    RestoreRecord,
    SignatureError,
    decode_restore_record,
    record_path,
    unb64url,
    write_restore_record,
)

from ._errors import JoinTokenError, RestoreRecordMissing


def join(state_dir: Path, token: str, deployment_id: str | None = None) -> RestoreRecord:
    """Write the restore record carried by a join token (base64url of its JSON)."""
    try:
        record, _ = decode_restore_record(unb64url(token.strip()))
    except (SignatureError, RecordDecodeError) as exc:
        raise JoinTokenError(f"not a join token: {exc}") from exc
    if deployment_id is not None and deployment_id != record.deployment_id:
        raise JoinTokenError(f"the join token is for {record.deployment_id}, not {deployment_id}")
    write_restore_record(record_path(state_dir, record.deployment_id), record)
    return record


def locate(state_dir: Path, deployment_id: str | None) -> Path:
    """The restore record to boot from, or :class:`RestoreRecordMissing`."""
    if deployment_id is not None:
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
