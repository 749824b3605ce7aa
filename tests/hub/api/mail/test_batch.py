"""``POST /mail/batch``: up to 500 mails, one answer per mail in order, each
as one ``POST /mail`` would have answered it, in one transaction."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from runtime.wire import INLINE_BODY_LIMIT

from ..harness import MAX_BODY, api, assert_error

pytestmark = pytest.mark.anyio


def mail(to: str, subject: str, **kw: Any) -> dict[str, Any]:
    return {"to": to, "subject": subject, "body": f"body of {subject}", **kw}


async def test_each_mail_gets_what_post_mail_would_have_answered_in_order(
    tmp_path: Path,
) -> None:
    async with api(tmp_path) as hub:
        one, two = await hub.deploy("one"), await hub.deploy("two")
        big = base64.b64encode(b"b" * (INLINE_BODY_LIMIT + 1)).decode()
        mails: list[Any] = [
            mail("one@mailrun.local", "a", message_id="<a@x>"),
            mail("two@mailrun.local", "b"),
            mail("nobody@mailrun.local", "c"),
            mail("not an address", "d"),
            {"subject": "no recipient"},
            mail("one@mailrun.local", "a", message_id="<a@x>"),  # a retry within the batch
            mail("one@mailrun.local", "other", message_id="<a@x>"),  # the id reused
            {"to": "one@mailrun.local", "subject": "e", "body_b64": big},
            {"to": "one@mailrun.local", "subject": "f", "body": "x" * (MAX_BODY + 1)},
            mail("one@mailrun.local", "g", message_id="start:run_1"),
        ]
        r = await hub.client.post("/mail/batch", json={"mails": mails})
        assert r.status_code == 200, r.text
        receipts = r.json()["receipts"]
        assert [(x["status"], x.get("reason"), x.get("seq")) for x in receipts] == [
            ("accepted", None, 1),
            ("accepted", None, 1),
            ("rejected", "unknown_address", None),
            ("error", "invalid_mail", None),
            ("error", "invalid_mail", None),
            ("accepted", None, 1),
            ("rejected", "message_id_reused", None),
            ("accepted", None, 2),
            ("rejected", "payload_too_large", None),
            ("error", "invalid_mail", None),
        ]
        assert receipts[5] == {**receipts[0], "duplicate": True}
        assert (receipts[0]["deployment_id"], receipts[1]["deployment_id"]) == (
            one["id"],
            two["id"],
        )
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 3
        # What a batch accepted, POST /mail knows: a retry gets the same receipt.
        again = await hub.send(
            "one@mailrun.local", subject="a", body="body of a", message_id="<a@x>"
        )
        assert again.json() == receipts[5]


async def test_a_batch_out_of_bounds_is_refused_whole(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        await hub.deploy("one")
        for mails in ([], [mail("one@mailrun.local", f"m{i}") for i in range(501)]):
            r = await hub.client.post("/mail/batch", json={"mails": mails})
            assert_error(r, 422, "invalid_request")
        assert_error(
            await hub.client.post("/mail/batch", json={"letters": []}), 422, "invalid_request"
        )
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 0
        r = await hub.client.post(
            "/mail/batch", json={"mails": [mail("one@mailrun.local", f"m{i}") for i in range(500)]}
        )
        assert r.status_code == 200
        assert [x["seq"] for x in r.json()["receipts"]] == list(range(1, 501))
        assert await hub.count("SELECT COUNT(*) FROM workflow_run_dispatch") == 500
