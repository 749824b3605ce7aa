"""``/producers``: adding, listing and removing the identities of the NATS
mail ingress. The seed is in the answer to the add only; the store keeps
the public key."""

from __future__ import annotations

from pathlib import Path

import pytest

from hub.natsauth import public_key
from runtime import Subjects, is_id

from ..harness import api, assert_error

pytestmark = pytest.mark.anyio


async def test_a_producer_is_added_listed_and_removed(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        r = await hub.client.post("/producers", json={"name": "shop"})
        assert r.status_code == 201, r.text
        shop = r.json()
        assert is_id(shop["id"], "prd") and shop["status"] == "active"
        assert public_key(shop["seed"]) == shop["nats_user"]
        assert shop["subject"] == Subjects().ingress(shop["id"])
        assert shop["inbox_prefix"] == f"_INBOX_{shop['id']}"
        stored = await hub.count(
            "SELECT COUNT(*) FROM producer WHERE nats_user = ?", shop["nats_user"]
        )
        assert stored == 1
        seen = (await hub.client.get(f"/producers/{shop['name']}")).json()
        assert "seed" not in seen and seen == {k: v for k, v in shop.items() if k != "seed"}

        assert_error(await hub.client.post("/producers", json={"name": "shop"}), 409, "name_taken")
        assert_error(
            await hub.client.post("/producers", json={"name": "Shop!"}), 422, "invalid_name"
        )
        assert_error(await hub.client.post("/producers", json={"nom": "x"}), 422, "invalid_request")
        assert_error(await hub.client.get("/producers/nobody"), 404, "unknown_producer")

        r = await hub.client.delete("/producers/shop")
        assert r.status_code == 200 and r.json()["status"] == "removed" and r.json()["removed_at"]
        again = await hub.client.delete(f"/producers/{shop['id']}")  # idempotent
        assert again.json() == r.json()
        # The name is free again, for a new identity with a new id.
        r = await hub.client.post("/producers", json={"name": "shop"})
        assert r.status_code == 201
        second = r.json()
        assert second["id"] != shop["id"] and second["nats_user"] != shop["nats_user"]
        assert (await hub.client.get("/producers/shop")).json()["id"] == second["id"]

        listed = (await hub.client.get("/producers")).json()["producers"]
        assert [(p["id"], p["status"]) for p in listed] == [
            (shop["id"], "removed"),
            (second["id"], "active"),
        ]
        active = (await hub.client.get("/producers?status=active")).json()["producers"]
        assert [p["id"] for p in active] == [second["id"]]
        assert_error(await hub.client.get("/producers?status=gone"), 422, "invalid_request")


async def test_producers_need_the_admin_token(tmp_path: Path) -> None:
    async with api(tmp_path) as hub:
        assert_error(
            await hub.anonymous.post("/producers", json={"name": "shop"}), 401, "unauthorized"
        )
        assert_error(await hub.anonymous.get("/producers"), 401, "unauthorized")
        assert await hub.count("SELECT COUNT(*) FROM producer") == 0
