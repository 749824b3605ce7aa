"""Restore records (v1 and v2), keys, ids and the run-state classifier."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from runtime import (
    RecordDecodeError,
    RestoreRecord,
    RunStatus,
    SignatureError,
    Sources,
    hello_message,
    is_id,
    is_live,
    is_terminal,
    new_id,
    read_restore_record,
    record_path,
    write_restore_record,
)
from runtime.sidecar_contract import HubKey, decode_restore_record
from runtime.wire import (
    accepts_trigger,
    anchor_is_live,
    b64url,
    generate_keypair,
    holds_items,
    public_key_of,
    sign,
    unb64url,
    verify,
)


def test_ids_have_prefix_and_104_random_bits() -> None:
    ids = {new_id("run") for _ in range(1000)}
    assert len(ids) == 1000
    assert all(is_id(i, "run") and len(i) == 4 + 26 for i in ids)
    assert not is_id("run_XYZ", "run")
    assert not is_id(new_id("dep"), "run")
    with pytest.raises(ValueError):
        new_id("nope")


def test_keys_sign_and_verify() -> None:
    seed, public = generate_keypair()
    assert public_key_of(seed) == public
    msg = hello_message("nonce", "dep_1", "ins_1")
    verify(public, msg, sign(seed, msg))
    with pytest.raises(SignatureError):
        verify(public, hello_message("other", "dep_1", "ins_1"), sign(seed, msg))
    _, other = generate_keypair()
    with pytest.raises(SignatureError):
        verify(other, msg, sign(seed, msg))
    with pytest.raises(SignatureError):
        sign("c2hvcnQ", msg)


def test_keys_are_standard_ed25519() -> None:
    # RFC 8032, 7.1, test 1: hubs and sidecars of any release, whatever
    # library each signs and verifies with, agree on keys and signatures.
    seed = b64url(bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"))
    public = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    signature = bytes.fromhex(
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555"
        "fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
    )
    assert unb64url(public_key_of(seed)).hex() == public
    assert sign(seed, b"") == signature
    verify(public_key_of(seed), b"", signature)
    with pytest.raises(SignatureError):
        verify(public_key_of(seed), b"", signature[:-1])
    with pytest.raises(SignatureError):
        verify("c2hvcnQ", b"", signature)  # not 32 bytes


def test_classifier() -> None:
    for s in ("pending", "running", "waiting", "suspended"):
        assert is_live(s) and not is_terminal(s) and accepts_trigger(s)
    for s in ("completed", "failed", "cancelled"):
        assert is_terminal(s) and not is_live(s) and not accepts_trigger(s)
    assert accepts_trigger(None)
    assert anchor_is_live("deployed") and anchor_is_live("running")
    assert not anchor_is_live("deleted")
    # Only a run waiting on an approval, or suspended, keeps its delivered
    # items unprocessed.
    assert [s for s in RunStatus if holds_items(s)] == ["waiting", "suspended"]


def _record() -> RestoreRecord:
    seed, public = generate_keypair()
    return RestoreRecord(
        deployment_id="dep_" + "a" * 26,
        address="shop@mailrun.local",
        session_id="ses_" + "b" * 26,
        instance_id="ins_" + "c" * 26,
        hub_key=HubKey(seed=seed),
        public_key=public,
        sources=Sources(entrypoint="flow:main", files={"flow.py": "async def main(c, i): ..."}),
        nats_url="nats://127.0.0.1:4333",
    )


def test_v2_record_written_atomically_0600_and_read_back(tmp_path: Path) -> None:
    record = _record()
    path = record_path(tmp_path, record.deployment_id)
    write_restore_record(path, record)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert read_restore_record(path) == (record, 2)
    assert [p.name for p in path.parent.iterdir()] == ["deployment.json"]
    raw = json.loads(path.read_text())
    assert raw["version"] == 2 and raw["hub_key"]["seed"] == record.hub_key.seed


def test_v1_record_is_read() -> None:
    v1 = {
        "deployment": {
            "deployment_id": "dep_" + "1" * 26,
            "address": "old@mailrun.local",
            "session_id": "ses_" + "2" * 26,
            "deployment_key": "SEED",
            "sources": {"entrypoint": "m:a", "files": {"m.py": "x = 1"}},
            "nats_url": "nats://127.0.0.1:4222",
        }
    }
    record, version = decode_restore_record(json.dumps(v1).encode())
    assert version == 1
    assert record.deployment_id == "dep_" + "1" * 26
    assert record.hub_key.seed == "SEED"
    assert record.sources.entrypoint == "m:a"
    assert record.instance_id is None


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b"[]", b'{"version": 2}', b'{"deployment": {}}', b'{"version": 99}'],
)
def test_bad_records_are_typed_errors(data: bytes) -> None:
    with pytest.raises(RecordDecodeError):
        decode_restore_record(data)


def test_a_torn_temp_file_never_replaces_the_record(tmp_path: Path) -> None:
    record = _record()
    path = record_path(tmp_path, record.deployment_id)
    write_restore_record(path, record)
    # A crash mid-write leaves only a temp file beside the record.
    (path.parent / ".deployment.json.999.tmp").write_bytes(b'{"version": 2, "depl')
    assert read_restore_record(path) == (record, 2)


def test_the_next_write_removes_a_crashed_writers_temp_file(tmp_path: Path) -> None:
    record = _record()
    path = record_path(tmp_path, record.deployment_id)
    write_restore_record(path, record)
    stale = path.parent / ".deployment.json.999.tmp"
    stale.write_bytes(b'{"version": 2, "hub_key": {"seed": "secret"')
    write_restore_record(path, record)
    assert sorted(p.name for p in path.parent.iterdir()) == ["deployment.json"]
