"""What a RunEvents frame's body accepts and records in its own transaction:
its runs' mail and items (``accept_triggers``) and their outgoing mail
(``record_outbound``), alike on SQLite and PostgreSQL (``hub.store``'s
``accept_triggers``, ``record_outbound``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hub.store import (
    Accepted,
    OutboundMail,
    OutboundStatus,
    Rejected,
    Trigger,
    Tx,
    accept_triggers,
    open_store,
    record_outbound,
)
from hub.store.sql import sql
from runtime import Reason
from tests.support.harnesses.wire import deploy
from tests.support.servers.postgres import PostgresServer

pytestmark = pytest.mark.anyio

_DISPATCHES = sql("SELECT message_id FROM workflow_run_dispatch ORDER BY seq")
_OUTBOUND = sql("SELECT recipient, status FROM outbound_mail")


@pytest.mark.parametrize("which", ["sqlite", "postgresql"])
async def test_mail_and_outgoing_mail_are_taken_inside_a_body(
    which: str, tmp_path: Path, postgres_server: PostgresServer
) -> None:
    target = str(tmp_path / "hub.db") if which == "sqlite" else postgres_server.new_database()
    async with await open_store(target) as store:
        dep = await deploy(store)
        mail = [
            Trigger(address=dep.address, body=b"a", message_id="<1@x>"),
            Trigger(address=dep.address, body=b"a", message_id="<1@x>"),  # the same, again
            Trigger(address=dep.address, body=b"other", message_id="<1@x>"),  # id reused
            Trigger(address="nobody@mailrun.local", body=b"c"),
        ]
        away = OutboundMail(
            deployment_id=dep.id,
            run_id="run_x",
            event_id="evt_x",
            send_key="<2@x>",
            sender=dep.address,
            recipient="someone@example.com",
            subject="s",
            body=b"d",
        )

        def body(tx: Tx) -> tuple[list[object], set[str], int, int]:
            outcomes, woken = accept_triggers(tx, mail)
            recorded = record_outbound(tx, [away], OutboundStatus.NO_RELAY)
            again = record_outbound(tx, [away], OutboundStatus.NO_RELAY)
            return list(outcomes), woken, recorded, again

        outcomes, woken, recorded, again = await store.transact(body)
        first, duplicate, reused, unknown = outcomes
        assert isinstance(first, Accepted) and not first.duplicate
        assert isinstance(duplicate, Accepted) and duplicate.dispatch_id == first.dispatch_id
        assert isinstance(reused, Rejected) and reused.reason == Reason.MESSAGE_ID_REUSED
        assert isinstance(unknown, Rejected) and unknown.reason == Reason.UNKNOWN_ADDRESS
        assert woken == {dep.id} and (recorded, again) == (1, 0)
        rows = await store.read(lambda tx: tx.fetch_all(_DISPATCHES))
        assert [r[0] for r in rows] == ["<1@x>"]
        outbound = await store.read(lambda tx: tx.fetch_all(_OUTBOUND))
        assert [tuple(r) for r in outbound] == [("someone@example.com", "no_relay")]
