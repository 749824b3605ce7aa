"""A deployment's mail settings over HTTP: shown as its ``mail``, set at
create and changed by PATCH (refused whole when one is not valid), one
catch-all per domain; and who may write: a sender the deployment does not
take is 403 ``sender_not_allowed`` on ``POST /mail`` and in a batch, and
leaves nothing stored (no dispatch, no run, no blob)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.hub.api.harness import SOURCE, Api, api, assert_error

pytestmark = pytest.mark.anyio

DEFAULTS = {
    "allow_from": [],
    "deny_from": [],
    "require_dmarc": False,
    "replies_to_ended": "top_level",
    "catch_all": False,
}
BIG = "x" * (100 * 1024)  # past the inline limit: a blob, if it were stored


async def stored(a: Api) -> tuple[int, int, int]:
    """Dispatches, runs (not anchors), and blobs that are not a version's sources."""
    return (
        await a.count("SELECT COUNT(*) FROM workflow_run_dispatch"),
        await a.count("SELECT COUNT(*) FROM workflow_run WHERE is_anchor = 0"),
        await a.count(
            "SELECT COUNT(*) FROM blob WHERE digest NOT IN (SELECT digest FROM deployment_version)"
        ),
    )


async def patch(a: Api, key: str, **body: Any) -> Any:
    return await a.client.patch(f"/workflows/deployments/{key}", json=body)


async def test_mail_settings_are_set_at_create_and_changed_by_patch(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        plain = await a.deploy("plain")
        assert plain["mail"] == DEFAULTS
        given = await a.deploy(
            "given",
            source=SOURCE,
            mail={"allow_from": ["*@Example.test", "boss@other.test", "*@example.test"]},
        )
        assert given["mail"] == {**DEFAULTS, "allow_from": ["*@example.test", "boss@other.test"]}
        r = await patch(
            a, "given", mail={"deny_from": ["spam@example.test"], "require_dmarc": True}
        )
        assert r.status_code == 200, r.text
        assert r.json()["mail"] == {
            **DEFAULTS,
            "allow_from": ["*@example.test", "boss@other.test"],
            "deny_from": ["spam@example.test"],
            "require_dmarc": True,
        }
        # A list given replaces the one in force; [] clears it; the policy patches alongside.
        r = await patch(a, "given", mail={"allow_from": [], "replies_to_ended": "refuse"},
                        max_attempts=3)  # fmt: skip
        assert r.json()["mail"]["allow_from"] == []
        assert r.json()["mail"]["replies_to_ended"] == "refuse"
        assert r.json()["max_attempts"] == 3
        shown = (await a.client.get("/workflows/deployments/given")).json()
        assert shown["mail"] == r.json()["mail"]


async def test_invalid_mail_settings_are_refused_whole(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        await a.deploy("flow")
        await patch(a, "flow", mail={"deny_from": ["*@spam.test"]})
        for bad, named in (
            ({"allow_from": ["example.test"]}, "allow_from"),
            ({"deny_from": ["a b@example.test"]}, "deny_from"),
            ({"allow_from": ["*@ok.test"], "replies_to_ended": "child"}, "replies_to_ended"),
            ({"allow_from": [f"u{i}@example.test" for i in range(101)]}, "allow_from"),
            ({"allow_from": ["x" * 250 + "@example.test"]}, "allow_from"),
        ):
            r = await patch(a, "flow", mail=bad, max_attempts=7)
            assert_error(r, 422, "invalid_mail_settings")
            assert named in r.json()["detail"]
        r = await patch(a, "flow", mail={"allow": ["*@ok.test"]})
        assert r.status_code == 422
        r = await a.client.post(
            "/workflows/deployments",
            json={"name": "bad", "source": SOURCE, "mail": {"deny_from": ["nobody"]}},
        )
        assert_error(r, 422, "invalid_mail_settings")
        assert await a.count("SELECT COUNT(*) FROM deployment WHERE name = 'bad'") == 0
        shown = (await a.client.get("/workflows/deployments/flow")).json()
        assert shown["mail"] == {**DEFAULTS, "deny_from": ["*@spam.test"]}
        assert shown["max_attempts"] == 5


async def test_one_catch_all_per_domain(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        first = await a.deploy("first", source=SOURCE, mail={"catch_all": True})
        assert first["mail"]["catch_all"] is True
        assert (
            await a.count(
                "SELECT COUNT(*) FROM deployment WHERE catch_all_domain = 'mailrun.local'"
            )
            == 1
        )
        await a.deploy("second")
        assert_error(await patch(a, "second", mail={"catch_all": True}), 409, "catch_all_taken")
        r = await a.client.post(
            "/workflows/deployments",
            json={"name": "third", "source": SOURCE, "mail": {"catch_all": True}},
        )
        assert_error(r, 409, "catch_all_taken")
        assert (await patch(a, "first", mail={"catch_all": False})).json()["mail"] == DEFAULTS
        r = await patch(a, "second", mail={"catch_all": True})
        assert r.json()["mail"]["catch_all"] is True
        await a.client.delete("/workflows/deployments/second")
        assert (await patch(a, "first", mail={"catch_all": True})).status_code == 200


async def test_a_denied_sender_is_403_and_nothing_is_stored(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        dep = await a.deploy("flow", source=SOURCE, mail={"deny_from": ["*@spam.test"]})
        for sender in ("eve@spam.test", "EVE+promo@Spam.test"):
            r = await a.send(dep["address"], text=BIG, **{"from": sender})
            assert_error(r, 403, "sender_not_allowed")
        assert await stored(a) == (0, 0, 0)
        r = await a.send(dep["address"], text="hi", **{"from": "alice@example.test"})
        assert r.status_code == 202, r.text
        r = await a.send(dep["address"], text="no sender")
        assert r.status_code == 202, r.text
        assert (await stored(a))[:2] == (2, 1)


async def test_an_allow_list_takes_only_its_senders(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        dep = await a.deploy(
            "flow",
            source=SOURCE,
            mail={"allow_from": ["*@example.test"], "deny_from": ["mallory@example.test"]},
        )
        for sender in ("bob@elsewhere.test", "mallory@example.test", None):
            fields = {"from": sender} if sender else {}
            assert_error(
                await a.send(dep["address"], text=BIG, **fields), 403, "sender_not_allowed"
            )
        assert await stored(a) == (0, 0, 0)
        ok = await a.send(dep["address"], message_id="m1", **{"from": "alice+x@example.test"})
        assert ok.status_code == 202, ok.text
        # A retry of what was taken is answered with its receipt, whatever changed since.
        await patch(a, "flow", mail={"deny_from": ["*@example.test"]})
        again = await a.send(dep["address"], message_id="m1", **{"from": "alice+x@example.test"})
        assert (again.status_code, again.json()["duplicate"]) == (202, True)
        assert again.json()["dispatch_id"] == ok.json()["dispatch_id"]
        assert (await stored(a))[0] == 1


async def test_a_batch_refuses_each_sender_on_its_own(tmp_path: Path) -> None:
    async with api(tmp_path) as a:
        dep = await a.deploy("flow", source=SOURCE, mail={"allow_from": ["*@example.test"]})
        mails = [
            {"to": dep["address"], "subject": "a", "from": "alice@example.test"},
            {"to": dep["address"], "subject": "b", "from": "bob@elsewhere.test", "body": BIG},
            {"to": dep["address"], "subject": "c", "from": "carol@example.test"},
        ]
        r = await a.client.post("/mail/batch", json={"mails": mails})
        assert r.status_code == 200, r.text
        receipts = r.json()["receipts"]
        assert [x["status"] for x in receipts] == ["accepted", "rejected", "accepted"]
        assert receipts[1]["reason"] == "sender_not_allowed"
        assert await stored(a) == (2, 1, 0)
