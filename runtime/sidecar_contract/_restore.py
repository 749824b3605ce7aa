"""The restore record: what a sidecar needs to boot without the hub.

Path: ``<state-dir>/workflow-runs/<deployment_id>/deployment.json``, mode 0600.
This release writes version 2::

    {"version": 2, "deployment_id", "address", "session_id", "instance_id",
     "hub_key": {"seed", "hub_public_key"}, "public_key",
     "sources": {"entrypoint": "m:a", "files": {path: text}}, "nats_url",
     "subject_prefix", "nats_seed"}

``nats_seed`` (the deployment's NATS identity, an nkey user seed) is absent
from records written before NATS identities existed; such a sidecar connects
without credentials.

and reads release 1's too (no ``version``, everything under ``deployment``,
the seed under ``deployment_key``); see docs/design.md section 6.

A record arrives from outside in a join token, so the decoder trusts none of
it: anything it cannot read, or whose deployment id is not an id (it names a
directory) or whose subject prefix is not one, is a ``RecordDecodeError``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from ..config import DEFAULT_NATS_URL, DEFAULT_SUBJECT_PREFIX
from ..errors import RecordDecodeError
from ..failpoints import failpoint
from ..wire import Subjects, is_id

RECORD_VERSION = 2
RECORD_NAME = "deployment.json"


class Sources(msgspec.Struct, kw_only=True):
    entrypoint: str = "flow:main"
    files: dict[str, str] = msgspec.field(default_factory=dict)


class HubKey(msgspec.Struct, kw_only=True):
    seed: str
    hub_public_key: str | None = None


class RestoreRecord(msgspec.Struct, kw_only=True):
    version: int = RECORD_VERSION
    deployment_id: str
    address: str
    session_id: str | None = None
    instance_id: str | None = None
    hub_key: HubKey
    public_key: str | None = None
    sources: Sources
    nats_url: str = DEFAULT_NATS_URL
    subject_prefix: str = DEFAULT_SUBJECT_PREFIX
    nats_seed: str | None = None


class _V1Deployment(msgspec.Struct, kw_only=True):
    deployment_id: str
    address: str
    session_id: str | None = None
    deployment_key: str
    sources: Sources
    nats_url: str = DEFAULT_NATS_URL


class _V1Record(msgspec.Struct):
    deployment: _V1Deployment


def record_path(state_dir: Path, deployment_id: str) -> Path:
    return state_dir / "workflow-runs" / deployment_id / RECORD_NAME


def decode_restore_record(data: bytes) -> tuple[RestoreRecord, int]:
    """Decode either format; return the record and the version it was written in."""
    try:
        record, version = _decode(data)
    except RecursionError:  # nesting deeper than the interpreter's stack
        raise RecordDecodeError("restore record is nested too deeply") from None
    if not is_id(record.deployment_id, "dep"):
        raise RecordDecodeError(
            f"restore record names {record.deployment_id[:80]!r}, not a deployment id"
        )
    try:
        Subjects(record.subject_prefix)
    except ValueError as exc:
        raise RecordDecodeError(f"restore record: {exc}") from None
    return record, version


def _decode(data: bytes) -> tuple[RestoreRecord, int]:
    try:
        raw: Any = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise RecordDecodeError(f"restore record is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise RecordDecodeError("restore record is not a JSON object")
    try:
        if "version" not in raw and "deployment" in raw:
            v1 = msgspec.convert(raw, _V1Record).deployment
            return (
                RestoreRecord(
                    deployment_id=v1.deployment_id,
                    address=v1.address,
                    session_id=v1.session_id,
                    hub_key=HubKey(seed=v1.deployment_key),
                    sources=v1.sources,
                    nats_url=v1.nats_url,
                ),
                1,
            )
        record = msgspec.convert(raw, RestoreRecord)
    except msgspec.ValidationError as exc:
        raise RecordDecodeError(f"restore record has a bad shape: {exc}") from exc
    if record.version > RECORD_VERSION:
        raise RecordDecodeError(
            f"restore record version {record.version} is newer than this release reads"
        )
    if record.version < 1:
        raise RecordDecodeError(f"restore record version {record.version} does not exist")
    return record, record.version


def read_restore_record(path: Path) -> tuple[RestoreRecord, int]:
    return decode_restore_record(path.read_bytes())


def write_restore_record(path: Path, record: RestoreRecord) -> None:
    """Atomically replace ``path``: temp file, fsync, rename, fsync the directory.

    A crash at any point leaves either the old record or the new one, never
    a partial file. The file is created 0600: it holds the deployment key.
    """
    record = msgspec.structs.replace(record, version=RECORD_VERSION)
    data = msgspec.json.format(msgspec.json.encode(record), indent=2)
    write_atomic(path, data, mode=0o600, failpoint_name="sidecar.record.before_rename")


def write_atomic(
    path: Path, data: bytes, *, mode: int = 0o600, failpoint_name: str | None = None
) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename, fsync the directory.

    ``failpoint_name`` names the failpoint between the fsynced temp file and
    the rename, where a crash must leave the old file whole.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # A writer that crashed before its rename left its temp file; it may hold
    # a deployment key, and nothing ever reads it.
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        if stale != tmp:
            stale.unlink(missing_ok=True)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, mode)
        if failpoint_name is not None:
            failpoint(failpoint_name)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # only a crash may leave a temp file behind
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
