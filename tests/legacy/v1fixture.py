"""A release-1 state dir of ``mailrun up``, byte for byte as docs/design.md section 6 fixes it.

Nothing of release 2 writes it: the SQL is release 1's DDL verbatim, the
envelopes and run states are plain msgpack maps, the restore record is
release 1's JSON. Only the key pair comes from ``runtime.wire.generate_keypair``:
Ed25519, base64url without padding, the text format release 1 used too.

One deployment in each interesting condition (by name):

  idle  live, never mailed: no top-level run yet
  busy  live; its run (id = its address) has processed mail (hub 'processed',
        inbox 'done', in its run state), delivered-but-pending mail (hub
        'delivered', inbox 'pending') and reserved mail (hub 'reserved', not in
        the inbox). With ``damaged=True`` one pending envelope is truncated.
  done  live; its run completed (result at the hub, state in the inbox)
  gone  deleted (anchor 'deleted', run cancelled); its sidecar dir is left behind

The workflow is the e2e recorder (``state["seen"]`` + ``state["count"]``),
and each run state is what that recorder wrote for the processed mail.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from runtime import new_id
from runtime.wire import generate_keypair
from tests.e2e.harness import recorder_source

DOMAIN = "mailrun.local"
T0 = 1_700_000_000.0
NATS_URL = "nats://127.0.0.1:4222"
SENDER = "someone@example.org"

HUB_DDL = """
CREATE TABLE schema_version (version INTEGER NOT NULL);   -- one row: 1
CREATE TABLE deployment (
  id          TEXT PRIMARY KEY,      -- dep_<26 hex>
  name        TEXT NOT NULL,
  address     TEXT NOT NULL UNIQUE,  -- <name>@mailrun.local
  public_key  TEXT NOT NULL UNIQUE,
  sources     TEXT NOT NULL,         -- JSON {"entrypoint": "m:a", "files": {path: text}}
  created_at  REAL NOT NULL
);
CREATE TABLE workflow_run (
  id            TEXT PRIMARY KEY,    -- anchor row: the deployment id
                                     -- top-level run: the deployment ADDRESS
                                     -- child run: run_<26 hex>
  deployment_id TEXT NOT NULL REFERENCES deployment(id),
  parent_run_id TEXT,
  status        TEXT NOT NULL,       -- anchor: 'running' while live, 'deleted'
                                     -- runs: pending, running, waiting,
                                     --       completed, failed, cancelled
  result        TEXT,                -- JSON
  error         TEXT,
  created_at    REAL NOT NULL,
  updated_at    REAL NOT NULL
);
CREATE TABLE workflow_run_dispatch (
  id            TEXT PRIMARY KEY,    -- dsp_<26 hex>
  deployment_id TEXT NOT NULL,
  address       TEXT NOT NULL,       -- the run was addressed by this
  kind          TEXT NOT NULL,       -- 'mail'
  message_id    TEXT,
  sender        TEXT,
  subject       TEXT,
  body          BLOB,
  status        TEXT NOT NULL,       -- reserved, delivered, processed, cancelled
  created_at    REAL NOT NULL
);
"""

INBOX_DDL = """
CREATE TABLE inbox (
  dispatch_id TEXT PRIMARY KEY,
  envelope    BLOB NOT NULL,         -- msgpack map, below
  state       TEXT NOT NULL          -- 'pending' or 'done'
);
CREATE TABLE run_state (
  run_id TEXT PRIMARY KEY,
  state  BLOB NOT NULL               -- msgpack map: the handler's ctx.state
);
"""


@dataclass(frozen=True)
class V1Mail:
    dispatch_id: str
    subject: str
    body: bytes
    hub_status: str  # processed | delivered | reserved | cancelled
    inbox_state: str | None  # done | pending | None: not in the inbox
    message_id: str | None = None
    damaged: bool = False  # its envelope in the inbox is truncated

    def seen_entry(self) -> dict[str, Any]:
        """What the recorder appends to ``state["seen"]`` for this mail."""
        return {
            "dispatch_id": self.dispatch_id,
            "subject": self.subject,
            "text": self.body.decode(),
            "size": len(self.body),
            "sha256": hashlib.sha256(self.body).hexdigest(),
        }


@dataclass(frozen=True)
class V1Deployment:
    name: str
    id: str
    seed: str
    public_key: str
    session_id: str
    live: bool
    run_status: str | None  # None: no top-level run yet
    mail: tuple[V1Mail, ...] = ()

    @property
    def address(self) -> str:
        return f"{self.name}@{DOMAIN}"

    @property
    def processed(self) -> list[V1Mail]:
        return [m for m in self.mail if m.hub_status == "processed"]

    @property
    def waiting(self) -> list[V1Mail]:
        """Accepted, not processed, readable: release 2 must process these, in order."""
        return [m for m in self.mail if m.hub_status in ("delivered", "reserved") and not m.damaged]

    @property
    def result(self) -> Any:
        return {"count": len(self.processed)} if self.run_status == "completed" else None

    def run_state(self) -> dict[str, Any]:
        seen = [m.seen_entry() for m in self.processed]
        return {"seen": seen, "count": len(seen)}

    def workflow_dir(self, state_dir: Path) -> Path:
        return state_dir / "sidecars" / self.id / "workflow-runs" / self.id

    def record_file(self, state_dir: Path) -> Path:
        return self.workflow_dir(state_dir) / "deployment.json"

    def inbox_file(self, state_dir: Path) -> Path:
        return self.workflow_dir(state_dir) / "inbox.db"


@dataclass(frozen=True)
class V1State:
    state_dir: Path
    deployments: dict[str, V1Deployment]

    def __getitem__(self, name: str) -> V1Deployment:
        return self.deployments[name]


def _mail(subject: str, hub_status: str, inbox_state: str | None, **kw: Any) -> V1Mail:
    body = kw.pop("body", f"{subject} body".encode())
    return V1Mail(new_id("dsp"), subject, body, hub_status, inbox_state, **kw)


def _deployment(name: str, live: bool, run_status: str | None, *mail: V1Mail) -> V1Deployment:
    seed, public_key = generate_keypair()
    return V1Deployment(
        name, new_id("dep"), seed, public_key, new_id("ses"), live, run_status, mail
    )


def write_v1_state(state_dir: Path, *, damaged: bool = False) -> V1State:
    """Write release 1's ``<state>/hub.db`` and ``<state>/sidecars/...``; return what it holds."""
    busy_mail = [
        _mail("old-1", "processed", "done", message_id="v1-busy-1"),
        _mail("old-2", "processed", "done"),
        _mail("pending-1", "delivered", "pending", message_id="v1-busy-3"),
    ]
    if damaged:
        busy_mail.append(_mail("damaged", "delivered", "pending", damaged=True))
    busy_mail += [
        _mail("pending-2", "delivered", "pending"),
        _mail("reserved-1", "reserved", None, message_id="v1-busy-6"),
        _mail("reserved-2", "reserved", None),
    ]
    deployments = [
        _deployment("idle", True, None),
        _deployment("busy", True, "running", *busy_mail),
        _deployment("done", True, "completed", _mail("stop", "processed", "done")),
        _deployment("gone", False, "cancelled", _mail("bye", "processed", "done")),
    ]
    state_dir.mkdir(parents=True, exist_ok=True)
    _write_hub(state_dir / "hub.db", deployments)
    for dep in deployments:
        _write_record(dep.record_file(state_dir), dep)
        _write_inbox(dep.inbox_file(state_dir), dep)
    return V1State(state_dir, {d.name: d for d in deployments})


def _sources() -> dict[str, Any]:
    return {"entrypoint": "flow:main", "files": {"flow.py": recorder_source()}}


def _write_hub(path: Path, deployments: list[V1Deployment]) -> None:
    db = sqlite3.connect(path)
    try:
        db.executescript(HUB_DDL)
        db.execute("INSERT INTO schema_version (version) VALUES (1)")
        for i, dep in enumerate(deployments):
            created = T0 + i
            db.execute(
                "INSERT INTO deployment VALUES (?, ?, ?, ?, ?, ?)",
                (dep.id, dep.name, dep.address, dep.public_key, json.dumps(_sources()), created),
            )
            anchor = "running" if dep.live else "deleted"
            _run(db, dep.id, dep.id, anchor, None, created, T0 + (500 if not dep.live else i))
            if dep.run_status is not None:
                result = json.dumps(dep.result) if dep.result is not None else None
                _run(db, dep.address, dep.id, dep.run_status, result, T0 + 100, T0 + 400)
        # Acceptance order is rowid order: one deployment's mail after another's.
        at = T0 + 100
        for dep in deployments:
            for m in dep.mail:
                at += 1
                db.execute(
                    "INSERT INTO workflow_run_dispatch (id, deployment_id, address, kind,"
                    " message_id, sender, subject, body, status, created_at)"
                    " VALUES (?, ?, ?, 'mail', ?, ?, ?, ?, ?, ?)",
                    (
                        m.dispatch_id,
                        dep.id,
                        dep.address,
                        m.message_id,
                        SENDER,
                        m.subject,
                        m.body,
                        m.hub_status,
                        at,
                    ),
                )
        db.commit()
    finally:
        db.close()


def _run(
    db: sqlite3.Connection,
    run_id: str,
    dep_id: str,
    status: str,
    result: str | None,
    created: float,
    updated: float,
) -> None:
    db.execute(
        "INSERT INTO workflow_run (id, deployment_id, parent_run_id, status, result, error,"
        " created_at, updated_at) VALUES (?, ?, NULL, ?, ?, NULL, ?, ?)",
        (run_id, dep_id, status, result, created, updated),
    )


def _write_record(path: Path, dep: V1Deployment) -> None:
    record = {
        "deployment": {
            "deployment_id": dep.id,
            "address": dep.address,
            "session_id": dep.session_id,
            "deployment_key": dep.seed,
            "sources": _sources(),
            "nats_url": NATS_URL,
        }
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)


def v1_envelope(dep: V1Deployment, m: V1Mail) -> bytes:
    """A release-1 inbox envelope: no ``run_id`` (the run id is the address), no ``seq``."""
    data = msgspec.msgpack.encode(
        {
            "v": 1,
            "dispatch_id": m.dispatch_id,
            "deployment_id": dep.id,
            "address": dep.address,
            "kind": "mail",
            "message_id": m.message_id,
            "sender": SENDER,
            "subject": m.subject,
            "body": m.body,
        }
    )
    return data[: len(data) // 2] if m.damaged else data


def _write_inbox(path: Path, dep: V1Deployment) -> None:
    db = sqlite3.connect(path)
    try:
        db.executescript(INBOX_DDL)
        for m in dep.mail:
            if m.inbox_state is not None:
                db.execute(
                    "INSERT INTO inbox (dispatch_id, envelope, state) VALUES (?, ?, ?)",
                    (m.dispatch_id, v1_envelope(dep, m), m.inbox_state),
                )
        if dep.processed:
            db.execute(
                "INSERT INTO run_state (run_id, state) VALUES (?, ?)",
                (dep.address, msgspec.msgpack.encode(dep.run_state())),
            )
        db.commit()
    finally:
        db.close()
