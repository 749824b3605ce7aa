"""A deployment's mail settings in the store, on SQLite and PostgreSQL: kept
as written and read back by the doors (a recipient's, a catch-all's), held
in the accepting transaction (a sender the deployment does not take is
rejected and nothing of it written), one catch-all per domain."""

from __future__ import annotations

from functools import partial

import msgspec
import pytest

from hub._errors import CatchAllTaken, InvalidMailSettings
from hub.store import (
    MailChange,
    MailSettings,
    Trigger,
    accept_triggers,
    get_deployment,
    open_store,
    set_mail_settings,
    settings_at,
)
from hub.store.mail import settings_of
from tests.support.harnesses.wire import deploy
from tests.support.store import read_one

pytestmark = pytest.mark.anyio


async def test_settings_are_kept_and_found_by_address_or_catch_all(database: str) -> None:
    async with await open_store(database) as store:
        flow, other = await deploy(store, "flow"), await deploy(store, "other")
        change = MailChange(allow_from=["*@Example.test"], require_dmarc=True, catch_all=True)
        kept = await store.transact(
            partial(set_mail_settings, deployment_id=flow.id, change=change)
        )
        assert kept == MailSettings(allow_from=("*@example.test",), require_dmarc=True,
                                    catch_all=True)  # fmt: skip
        view = await store.read(partial(get_deployment, key=flow.id))
        assert view.mail == kept
        at = partial(settings_at)
        assert await store.read(partial(at, address="Flow+tag@mailrun.local")) == kept
        # An address nobody has: the domain's catch-all's; another domain: none.
        assert await store.read(partial(at, address="nobody@mailrun.local")) == kept
        assert await store.read(partial(at, address="other@mailrun.local")) == MailSettings()
        assert await store.read(partial(at, address="flow@elsewhere.test")) is None
        found = await store.read(partial(settings_of, deployment_ids=[flow.id, other.id]))
        assert found == {flow.id: msgspec.structs.replace(kept, catch_all=False)}
        with pytest.raises(CatchAllTaken):
            await store.transact(
                partial(set_mail_settings, deployment_id=other.id,
                        change=MailChange(catch_all=True, deny_from=["x@y.test"]))
            )  # fmt: skip
        with pytest.raises(InvalidMailSettings):
            await store.transact(
                partial(set_mail_settings, deployment_id=other.id,
                        change=MailChange(deny_from=["nobody"]))
            )  # fmt: skip
        assert await store.read(partial(at, address="other@mailrun.local")) == MailSettings()


async def test_a_sender_not_taken_is_rejected_and_nothing_written(database: str) -> None:
    async with await open_store(database) as store:
        flow = await deploy(store, "flow")
        change = MailChange(deny_from=["*@spam.test"])
        await store.transact(partial(set_mail_settings, deployment_id=flow.id, change=change))
        triggers = [
            Trigger(address=flow.address, sender="eve@spam.test", body=b"x" * 70_000),
            Trigger(address=flow.address, sender="alice@example.test", body=b"ok"),
            # Only mail is held to it: a signal's sender is no one's address.
            Trigger(address=flow.address, kind="signal", sender="eve@spam.test", body=b"{}"),
        ]
        outcomes, _ = await store.transact(partial(accept_triggers, triggers=triggers))
        assert [o.status for o in outcomes] == ["rejected", "accepted", "accepted"]
        assert outcomes[0].reason == "sender_not_allowed"  # type: ignore[union-attr]
        row = await read_one(store, "SELECT COUNT(*) FROM workflow_run_dispatch")
        assert row is not None and row[0] == 2
        row = await read_one(store, "SELECT COUNT(*) FROM blob WHERE size = 70000")
        assert row is not None and row[0] == 0
