"""Loading workflow sources, the handler's items, and ctx effects."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import msgspec
import pytest

from runtime import ChildRunStarted, DispatchProcessed, RunFailed, Sources, check_layout
from sidecar import (
    ApprovalDecision,
    ChildEnded,
    Context,
    EntrypointError,
    Mail,
    RunAlreadyEnded,
    Signal,
    Start,
    StateNotSerializable,
    WorkflowLoadError,
    load_workflow,
)
from sidecar.execution import item_of
from sidecar.execution.code import written_mark
from sidecar.storage import Envelope, decode_envelope, encode_envelope
from tests.support.harnesses.sidecar import deployed_sidecar, mail, make_deployment


def load(tmp_path: Path, files: dict[str, str], entrypoint: str = "flow:main") -> object:
    return load_workflow(
        Sources(entrypoint=entrypoint, files=files), tmp_path / "src", "dep_" + "a" * 26
    )


def test_sources_import_each_other_relatively_and_never_shadow_the_sidecars_modules(
    tmp_path: Path,
) -> None:
    handler = load(
        tmp_path,
        {
            "flow.py": "from .json import VALUE\nfrom .pkg.helper import twice\n"
            "async def main(ctx, item):\n    return twice(VALUE)\n",
            "json.py": "VALUE = 21\n",
            "pkg/helper.py": "def twice(x):\n    return 2 * x\n",
        },
    )
    assert callable(handler)
    assert sys.modules["json"] is json  # the user's json.py is not the stdlib's
    assert (tmp_path / "src" / "pkg" / "helper.py").read_text().startswith("def twice")


def test_reloading_new_sources_drops_the_old_files(tmp_path: Path) -> None:
    load(tmp_path, {"flow.py": "async def main(ctx, item): pass\n", "old.py": "X = 1\n"})
    load(tmp_path, {"flow.py": "async def main(ctx, item): pass\n"})
    assert not (tmp_path / "src" / "old.py").exists()


def test_a_start_with_the_sources_already_written_leaves_their_files_and_bytecode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as in a sidecar
    files = {"flow.py": "async def main(ctx, item): pass\n", "pkg/helper.py": "X = 1\n"}
    load(tmp_path, files)
    flow = tmp_path / "src" / "flow.py"
    cached = sorted((tmp_path / "src" / "__pycache__").iterdir())
    assert cached  # the import compiled flow.py and cached it beside the file
    before = {path: path.stat().st_ino for path in [flow, *cached]}
    load(tmp_path, dict(files))
    assert {path: path.stat().st_ino for path in before} == before


def test_new_sources_are_written_again_and_run(tmp_path: Path) -> None:
    load(tmp_path, {"flow.py": "async def main(ctx, item):\n    return 1\n"})
    handler = load(tmp_path, {"flow.py": "async def main(ctx, item):\n    return 2\n"})
    assert "return 2" in (tmp_path / "src" / "flow.py").read_text()
    assert anyio.run(handler, None, None) == 2


def test_sources_cut_short_under_their_mark_are_written_again(tmp_path: Path) -> None:
    files = {"flow.py": "async def main(ctx, item):\n    return 3\n"}
    load(tmp_path, files)
    # A power cut after the mark was fsynced and before the file was.
    (tmp_path / "src" / "flow.py").write_text("")
    handler = load(tmp_path, files)
    assert anyio.run(handler, None, None) == 3
    assert written_mark(tmp_path / "src").exists()


@pytest.mark.parametrize(
    ("files", "entrypoint", "error", "text"),
    [
        ({"flow.py": "async def main(ctx, item): pass\n"}, "flow", EntrypointError, "module:attr"),
        (
            {"flow.py": "async def main(ctx, item): pass\n"},
            "nope:main",
            EntrypointError,
            "not in the sources",
        ),
        (
            {"flow.py": "async def other(ctx, item): pass\n"},
            "flow:main",
            EntrypointError,
            "has no 'main'",
        ),
        (
            {"flow.py": "def main(ctx, item): pass\n"},
            "flow:main",
            EntrypointError,
            "not an async function",
        ),
        ({"flow.py": "async def main(ctx, item)\n"}, "flow:main", WorkflowLoadError, "SyntaxError"),
        (
            {"flow.py": "import not_a_module_anywhere\n"},
            "flow:main",
            WorkflowLoadError,
            "not_a_module_anywhere",
        ),
        ({"../escape.py": "x = 1\n"}, "flow:main", WorkflowLoadError, "must be relative"),
        ({"/abs.py": "x = 1\n"}, "flow:main", WorkflowLoadError, "must be relative"),
        (
            {"flow.py": "x = 1\n", "flow.py/x.py": "x = 1\n"},
            "flow:main",
            WorkflowLoadError,
            "both a file and a directory",
        ),
    ],
)
def test_bad_sources_raise_typed_errors(
    tmp_path: Path, files: dict[str, str], entrypoint: str, error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=text):
        load(tmp_path, files, entrypoint)
    assert not (tmp_path / "escape.py").exists()


def envelope(kind: str, body: bytes = b"caf\xc3\xa9 \xff", subject: str | None = None) -> Envelope:
    return Envelope(
        dispatch_id="dsp_1",
        address="a@x",
        run_id="run_1",
        seq=7,
        kind=kind,
        subject=subject,
        body=body,
    )


def test_items_by_kind_with_text_decoded_leniently() -> None:
    assert isinstance(item_of(envelope("mail")), Mail)
    assert isinstance(item_of(envelope("signal")), Signal)
    approval = item_of(envelope("approval"))
    assert isinstance(approval, ApprovalDecision)
    assert (approval.kind, approval.run_id, approval.seq, approval.subject) == (
        "approval",
        "run_1",
        7,
        "",
    )
    assert approval.text == "caf\u00e9 \ufffd"
    assert isinstance(item_of(envelope("start")), Start)
    assert isinstance(item_of(envelope("child")), ChildEnded)
    odd = item_of(envelope("carrier-pigeon"))
    assert isinstance(odd, Mail) and odd.kind == "carrier-pigeon"


def test_a_mail_carries_its_raw_message_and_an_envelope_without_one_reads_as_none() -> None:
    raw = b"Subject: hi\r\nX-Order: 7\r\n\r\nhi\r\n"
    sent = msgspec.structs.replace(envelope("mail"), raw=raw)
    mail = item_of(decode_envelope(encode_envelope(sent)))
    assert isinstance(mail, Mail) and mail.raw == raw
    # Written before the field existed (release 1 or 2): no raw message.
    older = msgspec.msgpack.encode({"v": 2, "dispatch_id": "dsp_1", "kind": "mail"})
    plain = item_of(decode_envelope(older))
    assert isinstance(plain, Mail) and plain.raw is None


def test_a_signal_is_named_by_its_subject_and_carries_its_json_payload() -> None:
    body = b'{"sku": "a-1", "qty": [1, 2.5, null]}'
    signal = item_of(envelope("signal", body, subject="restock"))
    assert isinstance(signal, Signal)
    assert (signal.name, signal.subject) == ("restock", "restock")
    assert signal.payload == {"sku": "a-1", "qty": [1, 2.5, None]}
    assert (signal.body, signal.text) == (body, body.decode())
    for payload, value in [(b"null", None), (b"7", 7), (b'"x"', "x"), (b"[]", [])]:
        item = item_of(envelope("signal", payload, subject="s"))
        assert isinstance(item, Signal) and item.payload == value


def test_an_approval_decision_reads_its_id_and_decision() -> None:
    body = b'{"approval_id": "apr_1", "decision": "reject", "extra": 1}'
    decision = item_of(envelope("approval", body, subject="reject"))
    assert isinstance(decision, ApprovalDecision)
    assert (decision.approval_id, decision.decision, decision.subject) == (
        "apr_1",
        "reject",
        "reject",
    )


def test_a_start_item_carries_the_spawn_input() -> None:
    start = item_of(envelope("start", b'{"order": 42, "lines": ["a", "b"]}'))
    assert isinstance(start, Start) and start.kind == "start"
    assert start.input == {"order": 42, "lines": ["a", "b"]}
    for body, value in [(b"null", None), (b"[1]", [1]), (b'"x"', "x")]:
        item = item_of(envelope("start", body))
        assert isinstance(item, Start) and item.input == value


def test_a_child_item_carries_the_childs_end() -> None:
    done = item_of(
        envelope(
            "child",
            b'{"child_run_id": "run_2", "status": "completed", "result": {"n": 3}, "error": null}',
        )
    )
    assert isinstance(done, ChildEnded)
    assert (done.child_run_id, done.status, done.result, done.error) == (
        "run_2",
        "completed",
        {"n": 3},
        None,
    )
    failed = item_of(
        envelope("child", b'{"child_run_id": "run_3", "status": "failed", "error": "boom"}')
    )
    assert isinstance(failed, ChildEnded)
    assert (failed.status, failed.result, failed.error) == ("failed", None, "boom")


# Bodies a hub would never write, and the JSON value each holds (None: none):
# not JSON, not UTF-8, cut short, deeper than the decoder's limit, a number
# out of range; JSON of the wrong shape, fields of the wrong type.
MALFORMED: list[tuple[bytes, object]] = [
    (b"", None),
    (b"\xff\xfe", None),
    (b'{"approval_id": "apr_1"', None),
    (b"[" * 100_000, None),
    (b"1e999999", None),
    (b'"just a string"', "just a string"),
    (b"[1, 2]", [1, 2]),
    (
        b'{"approval_id": 5, "decision": ["approve"], "child_run_id": {}, "status": 1,'
        b' "error": {"x": 1}}',
        {
            "approval_id": 5,
            "decision": ["approve"],
            "child_run_id": {},
            "status": 1,
            "error": {"x": 1},
        },
    ),
]


@pytest.mark.parametrize(("body", "value"), MALFORMED)
def test_a_malformed_body_leaves_the_kinds_fields_empty(body: bytes, value: object) -> None:
    approval = item_of(envelope("approval", body))
    assert isinstance(approval, ApprovalDecision)
    assert (approval.approval_id, approval.decision, approval.body) == ("", "", body)
    child = item_of(envelope("child", body))
    assert isinstance(child, ChildEnded)
    assert (child.child_run_id, child.status, child.result, child.error) == ("", "", None, None)
    signal = item_of(envelope("signal", body, subject="s"))
    assert isinstance(signal, Signal)
    assert (signal.name, signal.payload) == ("s", value)
    assert signal.text == body.decode("utf-8", errors="replace")
    start = item_of(envelope("start", body))
    assert isinstance(start, Start) and start.input == value


def test_ctx_ends_a_run_once_and_only_with_json_results() -> None:
    ctx = Context(run_id="run_1", deployment_id="dep_1", dispatch_id="dsp_1", state={}, minter=None)
    with pytest.raises(StateNotSerializable):
        ctx.complete(object())
    assert not ctx.ended
    ctx.complete({"ok": True})
    with pytest.raises(RunAlreadyEnded):
        ctx.fail("too late")
    assert (ctx.completed, ctx.failed, ctx.result) == (True, False, {"ok": True})


@pytest.mark.anyio
async def test_a_workflow_that_does_not_load_fails_its_run_visibly(tmp_path: Path) -> None:
    dep = make_deployment(tmp_path, source="async def other(ctx, item): pass\n")
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 1, "a"))
        await hub.wait_events(RunFailed, 1)
    assert "WorkflowLoadError" in hub.of_kind(RunFailed)[0].error
    assert "has no 'main'" in hub.of_kind(RunFailed)[0].error


SPAWNER = """
CALLS = {"n": 0}

async def main(ctx, item):
    child = await ctx.spawn("flow:child", {"from": item.subject})
    ctx.state.setdefault("children", []).append(child)
    approval = await ctx.request_approval("ship it?")
    ctx.state["approval"] = approval
    CALLS["n"] += 1
    if CALLS["n"] == 1:
        raise RuntimeError("crash after minting")
"""


@pytest.mark.anyio
async def test_spawn_mints_through_the_hub_and_a_retry_gets_the_same_child(
    tmp_path: Path,
) -> None:
    dep = make_deployment(tmp_path, source=SPAWNER)
    async with deployed_sidecar(dep) as (hub, _):
        await hub.deliver(mail(dep, 1, "parent"))
        await hub.wait_events(DispatchProcessed, 1)
    (started,) = hub.of_kind(ChildRunStarted)
    assert len(hub.minted) == 1  # the retried handler asked again, with the same request id
    assert started.child_run_id == next(iter(hub.minted.values()))
    assert (started.entrypoint, started.input) == ("flow:child", {"from": "parent"})
    (processed,) = hub.of_kind(DispatchProcessed)
    assert processed.state["children"] == [started.child_run_id]
    assert processed.state["approval"].startswith("apr_")


def test_every_layout_the_hub_accepts_at_its_limits_is_written(tmp_path: Path) -> None:
    # The hub accepts exactly what check_layout accepts; here, at each limit.
    name_255 = "n" * 252 + ".py"
    wide_255 = "\u00e9" * 126 + "abc"  # 255 bytes of UTF-8 in 129 characters
    path_1024 = "/".join(["d" * 254] * 4) + "/x.py"
    files = {
        "flow.py": "from . import helper\nasync def main(ctx, item): pass\n",
        "helper.py": "",
        name_255: "",
        f"deep/{wide_255}": "\u00e9t\u00e9\n",
        path_1024: "",
        ".hidden": "",
        "with space/-~!.txt": "",
        "a/b/c/d/e/f/g.py": "",
        **{f"many/m{i}.py": "" for i in range(992)},
    }
    assert len(path_1024.encode()) == 1024 and len(files) == 1000
    check_layout(files)
    state = tmp_path / ("s" * 200) / "workflow-runs" / ("dep_" + "a" * 26)
    load_workflow(Sources(entrypoint="flow:main", files=files), state / "src", "dep_" + "a" * 26)
    for name, text in files.items():
        assert (state / "src" / name).read_text(encoding="utf-8") == text
