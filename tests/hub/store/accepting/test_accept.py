"""Mail acceptance: the read-or-mint function and the group-committing Acceptor."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import msgspec
import pytest

from hub import Accepted, Acceptor, Rejected, Store, StoreUnavailable, Trigger
from hub.store import (
    WITH_OTHERS,
    RefusedByRun,
    count_by_status,
    count_reserved,
    create_deployment,
    open_store,
)
from hub.store.sql import sql
from runtime.wire import INLINE_BODY_LIMIT
from tests.support import wait_for
from tests.support.servers.postgres import PostgresServer
from tests.support.store import execute, rows

pytestmark = pytest.mark.anyio

SET_STATUS = sql("UPDATE workflow_run_dispatch SET status = ? WHERE deployment_id = ? AND seq = ?")


@asynccontextmanager
async def running(database: str, **store_kw: Any) -> AsyncIterator[tuple[Store, Acceptor]]:
    async with await open_store(database, **store_kw) as store:
        acceptor = Acceptor(store)
        async with anyio.create_task_group() as tg:
            await tg.start(acceptor.run)
            yield store, acceptor
            tg.cancel_scope.cancel()


async def deploy(store: Store, name: str) -> str:
    created = await create_deployment(
        store, name=name, source="async def main(ctx, item): pass\n",
        domain="mailrun.local", nats_url="nats://127.0.0.1:4222", subject_prefix="mailrun",
    )  # fmt: skip
    return created.deployment_id


async def query(store: Store, sql: str, *params: object) -> list[tuple[Any, ...]]:
    return await rows(store, sql, *params)


def mail(name: str, **kw: Any) -> Trigger:
    return Trigger(address=f"{name}@mailrun.local", **{"sender": "a@b.c", "subject": "s", **kw})


async def test_concurrent_first_triggers_mint_one_run(database: str) -> None:
    async with running(database) as (store, acceptor):
        dep = await deploy(store, "flow")
        receipts: list[Any] = []

        async def send(i: int) -> None:
            receipts.append(await acceptor.accept(mail("flow", body=b"%d" % i)))

        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(send, i)

        assert all(isinstance(r, Accepted) and not r.duplicate for r in receipts)
        assert len({r.run_id for r in receipts}) == 1
        assert sorted(r.seq for r in receipts) == list(range(1, 51))
        top = await query(store, "SELECT id FROM workflow_run WHERE is_top_level = 1")
        assert top == [(receipts[0].run_id,)]
        assert await query(store, "SELECT COUNT(*) FROM workflow_run_dispatch") == [(50,)]
        assert await query(store, "SELECT next_seq FROM deployment WHERE id = ?", dep) == [(51,)]
        assert acceptor.counts["batches"] < 50  # they were group-committed


async def test_two_hubs_on_one_postgresql_mint_one_run_with_gap_free_seqs(
    postgres_server: PostgresServer,
) -> None:
    """Two stores on one database, as two hubs have: each with its own
    connections and acceptor, so their transactions do run at once and only
    the anchor lock keeps them apart. Each mail also names a message id its
    twin sends through the other hub."""
    url = postgres_server.new_database()
    async with running(url) as (one, first), running(url) as (_, second):
        dep = await deploy(one, "flow")
        receipts: list[Any] = []

        async def send(i: int, acceptor: Acceptor) -> None:
            trigger = mail("flow", body=b"%d" % (i // 2), message_id=f"m{i // 2}")
            receipts.append(await acceptor.accept(trigger))

        async with anyio.create_task_group() as tg:
            for i in range(100):
                tg.start_soon(send, i, (first, second)[i % 2])

        assert all(isinstance(r, Accepted) for r in receipts), receipts
        assert len({r.run_id for r in receipts}) == 1
        firsts = [r for r in receipts if not r.duplicate]
        assert sorted(r.seq for r in firsts) == list(range(1, 51))
        assert len({r.dispatch_id for r in receipts}) == 50
        assert await query(one, "SELECT COUNT(*) FROM workflow_run WHERE is_anchor = 0") == [(1,)]
        assert await query(one, "SELECT next_seq FROM deployment WHERE id = ?", dep) == [(51,)]


async def test_on_postgresql_a_batch_waits_for_the_anchor_lock_and_reads_what_it_guarded(
    postgres_server: PostgresServer,
) -> None:
    """Another hub's transaction holds the deployment row locked and mints
    the top-level run meanwhile: this hub's batch waits for the lock (seen in
    pg_stat_activity), then takes the next seq of that run, without a retry."""
    url = postgres_server.new_database()
    async with running(url) as (store, acceptor):
        dep = await deploy(store, "flow")
        other = await asyncpg.connect(url)
        try:
            transaction = other.transaction()
            await transaction.start()
            await other.execute("SELECT id FROM deployment WHERE id = $1 FOR UPDATE", dep)
            receipts: list[Any] = []

            async def send() -> None:
                receipts.append(await acceptor.accept(mail("flow")))

            async def waiting() -> bool:
                rows = await query(
                    store,
                    "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND datname = current_database()",
                )
                return rows == [(1,)]

            async with anyio.create_task_group() as tg:
                tg.start_soon(send)
                await wait_for(waiting, what="the batch to wait for the anchor lock")
                run_id = "run_" + "0" * 26
                await other.execute(
                    "INSERT INTO workflow_run (id, deployment_id, status, is_top_level,"
                    " created_at, updated_at) VALUES ($1, $2, 'running', 1, 0, 0)",
                    run_id,
                    dep,
                )
                await other.execute(
                    "INSERT INTO workflow_run_dispatch (id, deployment_id, run_id, seq, kind,"
                    " status, created_at) VALUES ('dsp_x', $1, $2, 1, 'mail', 'reserved', 0)",
                    dep,
                    run_id,
                )
                await other.execute("UPDATE deployment SET next_seq = 2 WHERE id = $1", dep)
                await transaction.commit()
        finally:
            await other.close()
        [receipt] = receipts
        assert isinstance(receipt, Accepted) and (receipt.run_id, receipt.seq) == (run_id, 2)
        assert acceptor.counts["batches"] == 1


async def test_seq_follows_acceptance_order_per_deployment(database: str) -> None:
    async with running(database) as (store, acceptor):
        await deploy(store, "one")
        await deploy(store, "two")
        batch = [mail("one" if i % 3 else "two", body=b"%d" % i) for i in range(12)]
        outcomes = await acceptor.accept_many(batch)
        outcomes += [await acceptor.accept(mail("one", body=b"late"))]
        seqs: dict[str, list[int]] = {}
        for o in outcomes:
            assert isinstance(o, Accepted)
            seqs.setdefault(o.deployment_id, []).append(o.seq)
        assert sorted(len(s) for s in seqs.values()) == [4, 9]
        assert all(s == list(range(1, len(s) + 1)) for s in seqs.values())
        stored = await query(
            store,
            "SELECT body FROM workflow_run_dispatch d JOIN deployment p ON p.id = d.deployment_id"
            " WHERE p.name = 'one' ORDER BY seq",
        )
        assert [b for (b,) in stored] == [
            t.body for t in batch if t.address == "one@mailrun.local"
        ] + [b"late"]


async def test_message_id_makes_a_trigger_idempotent(database: str) -> None:
    async with running(database) as (store, acceptor):
        await deploy(store, "flow")
        first = await acceptor.accept(mail("flow", message_id="m-1", body=b"x"))
        again = await acceptor.accept(mail("flow", message_id="m-1", body=b"x"))
        same_batch = await acceptor.accept_many(
            [mail("flow", message_id="m-2"), mail("flow", message_id="m-2")]
        )
        assert isinstance(first, Accepted) and isinstance(again, Accepted)
        assert (again.dispatch_id, again.run_id, again.seq) == (first.dispatch_id, first.run_id, 1)
        assert (first.duplicate, again.duplicate) == (False, True)
        a, b = same_batch
        assert isinstance(a, Accepted) and isinstance(b, Accepted)
        assert (a.dispatch_id, a.duplicate, b.duplicate) == (b.dispatch_id, False, True)
        assert await query(store, "SELECT COUNT(*) FROM workflow_run_dispatch") == [(2,)]
        # Without a message id every call is a new trigger.
        c = await acceptor.accept(mail("flow", body=b"x"))
        d = await acceptor.accept(mail("flow", body=b"x"))
        assert isinstance(c, Accepted) and isinstance(d, Accepted)
        assert c.dispatch_id != d.dispatch_id and (c.seq, d.seq) == (3, 4)


async def stored_counts(store: Store) -> tuple[Any, ...]:
    """Dispatches, blobs, runs and every deployment's next seq: what acceptance writes."""
    (counts,) = await query(
        store,
        "SELECT (SELECT COUNT(*) FROM workflow_run_dispatch), (SELECT COUNT(*) FROM blob"
        "  WHERE digest NOT IN (SELECT digest FROM deployment_version)),"
        " (SELECT COUNT(*) FROM workflow_run WHERE is_anchor = 0)",
    )
    seqs = await query(store, "SELECT next_seq FROM deployment ORDER BY id")
    return (*counts, [seq for (seq,) in seqs])


def reused(outcome: object) -> bool:
    return isinstance(outcome, Rejected) and outcome.reason == "message_id_reused"


async def test_a_reused_message_id_with_other_content_fails_closed(database: str) -> None:
    """Guarantee 3: the same id with another body, subject, sender or kind is
    refused (409 message_id_reused) and stores nothing; an exact retry is the
    first receipt."""
    async with running(database) as (store, acceptor):
        await deploy(store, "flow")
        first = await acceptor.accept(mail("flow", message_id="m-1", body=b"x"))
        assert isinstance(first, Accepted)
        before = await stored_counts(store)
        big = b"b" * (INLINE_BODY_LIMIT + 1)
        others = {
            "body": mail("flow", message_id="m-1", body=b"y"),
            "big body": mail("flow", message_id="m-1", body=big),
            "subject": mail("flow", message_id="m-1", body=b"x", subject="other"),
            "from": mail("flow", message_id="m-1", body=b"x", sender="evil@b.c"),
            "no from": mail("flow", message_id="m-1", body=b"x", sender=None),
            "kind": mail("flow", message_id="m-1", body=b"x", kind="approval"),
        }
        for what, trigger in others.items():
            outcome = await acceptor.accept(trigger)
            assert reused(outcome), (what, outcome)
            assert isinstance(outcome, Rejected) and first.dispatch_id in outcome.detail
        assert await stored_counts(store) == before
        assert acceptor.rejected["message_id_reused"] == len(others)
        again = await acceptor.accept(mail("flow", message_id="m-1", body=b"x"))
        assert isinstance(again, Accepted) and again.duplicate
        assert (again.dispatch_id, again.seq) == (first.dispatch_id, first.seq)
        assert await stored_counts(store) == before


async def test_a_claim_checked_body_is_compared_by_digest_and_size(database: str) -> None:
    async with running(database) as (store, acceptor):
        await deploy(store, "flow")
        big = bytes(range(256)) * (INLINE_BODY_LIMIT // 256 + 1)
        first = await acceptor.accept(mail("flow", message_id="big", body=big))
        assert isinstance(first, Accepted)
        before = await stored_counts(store)
        one_byte_off = big[:-1] + b"\x00"
        for body in (one_byte_off, big[:-1], b"small"):
            assert reused(await acceptor.accept(mail("flow", message_id="big", body=body)))
        assert await stored_counts(store) == before
        again = await acceptor.accept(mail("flow", message_id="big", body=big))
        assert isinstance(again, Accepted) and again.dispatch_id == first.dispatch_id


async def test_a_reused_message_id_within_one_batch(database: str) -> None:
    """The first of a batch is accepted; a later one with other content is
    refused, an exact one is its duplicate; another deployment's id is its own."""
    async with running(database) as (store, acceptor):
        await deploy(store, "flow")
        await deploy(store, "other")
        outcomes = await acceptor.accept_many(
            [
                mail("flow", message_id="m", body=b"a"),
                mail("flow", message_id="m", body=b"b"),
                mail("flow", message_id="m", body=b"a", subject="t"),
                mail("flow", message_id="m", body=b"a"),
                mail("other", message_id="m", body=b"b"),
            ]
        )
        first, body, subject, exact, elsewhere = outcomes
        assert isinstance(first, Accepted) and not first.duplicate
        assert reused(body) and reused(subject)
        assert isinstance(exact, Accepted) and exact.dispatch_id == first.dispatch_id
        assert isinstance(elsewhere, Accepted) and elsewhere.deployment_id != first.deployment_id
        rows = await query(
            store, "SELECT body, seq FROM workflow_run_dispatch ORDER BY deployment_id, seq"
        )
        assert sorted(rows) == [(b"a", 1), (b"b", 1)]


async def test_retries_are_answered_from_their_own_deployment(database: str) -> None:
    """One message id at two deployments is two mails: a later batch's
    retries each get their own deployment's receipt, and content that only
    the other deployment took under that id is refused as reuse."""
    async with running(database) as (store, acceptor):
        await deploy(store, "flow")
        await deploy(store, "other")
        first = await acceptor.accept_many(
            [mail("flow", message_id="m", body=b"a"), mail("other", message_id="m", body=b"b")]
        )
        again = await acceptor.accept_many(
            [
                mail("other", message_id="m", body=b"b"),
                mail("flow", message_id="m", body=b"a"),
                mail("flow", message_id="m", body=b"b"),
            ]
        )
        assert all(isinstance(o, Accepted) and not o.duplicate for o in first)
        other, flow, crossed = again
        assert isinstance(other, Accepted) and other.duplicate
        assert isinstance(flow, Accepted) and flow.duplicate
        assert (flow.dispatch_id, other.dispatch_id) == tuple(
            o.dispatch_id for o in first if isinstance(o, Accepted)
        )
        assert reused(crossed)
        assert await query(store, "SELECT COUNT(*) FROM workflow_run_dispatch") == [(2,)]


async def test_a_retry_matches_a_release_1_row_with_nulls(database: str) -> None:
    """Release 1 stored NULL where this release stores "" (no sender, no
    subject, no body): a retry without them is the same content."""
    async with running(database) as (store, acceptor):
        await deploy(store, "flow")
        first = await acceptor.accept(Trigger(address="flow@mailrun.local", message_id="v1"))
        assert isinstance(first, Accepted)
        await execute(
            store, "UPDATE workflow_run_dispatch SET sender = NULL, subject = NULL, body = NULL"
        )
        again = await acceptor.accept(
            Trigger(address="flow@mailrun.local", message_id="v1", sender="", subject="")
        )
        assert isinstance(again, Accepted) and again.dispatch_id == first.dispatch_id
        assert reused(await acceptor.accept(mail("flow", message_id="v1")))


async def test_an_approval_decision_cannot_take_a_mails_message_id(database: str) -> None:
    """An approval's id is ``approval:<id>:<decision>``: a mail that took it
    first does not make the decision a duplicate; the approval stays pending."""
    async with running(database) as (store, acceptor):
        await deploy(store, "flow")
        first = await acceptor.accept(mail("flow"))
        assert isinstance(first, Accepted)
        await execute(
            store,
            "INSERT INTO approval (id, run_id, prompt, status, created_at)"
            " VALUES ('apr_1', ?, 'ok?', 'pending', 0)",
            first.run_id,
        )

        def decision(d: str) -> Trigger:
            return Trigger(
                kind="approval", approval_id="apr_1", decision=d,
                message_id=f"approval:apr_1:{d}", subject=d, body=b'{"d":"%s"}' % d.encode(),
            )  # fmt: skip

        # The same id, subject and body as the decision, but a mail.
        squat = msgspec.structs.replace(decision("approve"), kind="mail", approval_id=None,
                                        decision=None, address="flow@mailrun.local")  # fmt: skip
        assert isinstance(await acceptor.accept(squat), Accepted)
        assert reused(await acceptor.accept(decision("approve")))
        assert await query(store, "SELECT status FROM approval") == [("pending",)]
        # The other decision has its own id; its retry is its first receipt.
        rejected = await acceptor.accept(decision("reject"))
        retried = await acceptor.accept(decision("reject"))
        assert isinstance(rejected, Accepted) and isinstance(retried, Accepted)
        assert retried.dispatch_id == rejected.dispatch_id and retried.duplicate
        assert await query(store, "SELECT status, decision FROM approval") == [
            ("decided", "reject")
        ]


async def test_a_refused_dispatchs_id_with_other_content_is_reuse(database: str) -> None:
    async with running(database) as (store, acceptor):
        await deploy(store, "flow")
        first = await acceptor.accept(mail("flow", message_id="late", body=b"x"))
        assert isinstance(first, Accepted)
        await execute(
            store,
            "UPDATE workflow_run_dispatch SET status = 'cancelled',"
            " last_error = 'workflow_run_terminal'",
        )
        assert reused(await acceptor.accept(mail("flow", message_id="late", body=b"y")))
        exact = await acceptor.accept(mail("flow", message_id="late", body=b"x"))
        assert isinstance(exact, RefusedByRun) and exact.dispatch_id == first.dispatch_id


async def test_terminal_run_rejects_and_starts_nothing(database: str) -> None:
    async with running(database) as (store, acceptor):
        await deploy(store, "flow")
        first = await acceptor.accept(mail("flow"))
        assert isinstance(first, Accepted)
        await execute(store, "UPDATE workflow_run SET status = 'completed' WHERE id = ?",
                      first.run_id)  # fmt: skip
        refused = await acceptor.accept(mail("flow", message_id="late"))
        assert isinstance(refused, Rejected) and refused.reason == "workflow_run_terminal"
        assert await query(store, "SELECT COUNT(*) FROM workflow_run_dispatch") == [(1,)]
        assert await query(store, "SELECT COUNT(*) FROM workflow_run WHERE is_anchor = 0") == [(1,)]
        assert acceptor.rejected["workflow_run_terminal"] == 1


async def test_a_retry_learns_that_the_run_refused_its_accepted_dispatch(database: str) -> None:
    """F14: accepted while the hub thought the run live, refused by the run
    (it had completed first): a retry is told so, never "accepted" again."""
    async with running(database) as (store, acceptor):
        await deploy(store, "flow")
        first = await acceptor.accept(mail("flow", message_id="racing"))
        open_ = await acceptor.accept(mail("flow", message_id="still-open"))
        assert isinstance(first, Accepted) and isinstance(open_, Accepted)
        await execute(  # what ingesting DispatchProcessed{refused_terminal} does
            store,
            "UPDATE workflow_run_dispatch SET status = 'cancelled',"
            " last_error = 'workflow_run_terminal' WHERE id = ?",
            first.dispatch_id,
        )
        again, pending = await acceptor.accept_many(
            [mail("flow", message_id="racing"), mail("flow", message_id="still-open")]
        )
        assert isinstance(again, RefusedByRun) and again.reason == "workflow_run_terminal"
        assert (again.dispatch_id, again.run_id, again.seq) == (first.dispatch_id, first.run_id, 1)
        # A dispatch not refused (yet) keeps its first receipt.
        assert isinstance(pending, Accepted) and pending.duplicate
        assert await query(store, "SELECT COUNT(*) FROM workflow_run_dispatch") == [(2,)]


async def test_unknown_and_deleted_addresses_are_rejected(database: str) -> None:
    async with running(database) as (store, acceptor):
        dep = await deploy(store, "flow")
        from hub import delete_deployment

        assert await delete_deployment(store, dep)
        gone, unknown = await acceptor.accept_many([mail("flow"), mail("nobody")])
        assert isinstance(gone, Rejected) and gone.reason == "deployment_not_live"
        assert isinstance(unknown, Rejected) and unknown.reason == "unknown_address"
        assert await query(store, "SELECT COUNT(*) FROM workflow_run_dispatch") == [(0,)]


async def test_a_whole_is_accepted_for_all_or_none_beside_others(database: str) -> None:
    async with running(database) as (store, acceptor):
        await deploy(store, "a")
        await deploy(store, "b")
        # Two requests in one transaction: a whole with one refusal, and a
        # plain request that goes on regardless.
        async with anyio.create_task_group() as tg:
            results: dict[str, list[Any]] = {}

            async def ask(name: str, triggers: list[Trigger], whole: bool) -> None:
                results[name] = await acceptor.accept_many(triggers, whole=whole)

            tg.start_soon(ask, "whole", [mail("a"), mail("nobody"), mail("b")], True)
            tg.start_soon(ask, "plain", [mail("b", subject="plain")], False)
        first, unknown, last = results["whole"]
        assert isinstance(unknown, Rejected) and unknown.reason == "unknown_address"
        assert isinstance(first, Rejected) and first.reason == WITH_OTHERS
        assert isinstance(last, Rejected) and last.reason == WITH_OTHERS
        (plain,) = results["plain"]
        assert isinstance(plain, Accepted) and plain.seq == 1
        assert acceptor.counts["batches"] == 1  # both were waiting: one transaction
        stored = await query(store, "SELECT subject, seq FROM workflow_run_dispatch")
        assert stored == [("plain", 1)]  # nothing of the whole, not even a seq
        # Without the refusal, the whole is accepted, in order.
        both = await acceptor.accept_many([mail("a"), mail("b")], whole=True)
        assert [(type(o).__name__, o.seq) for o in both] == [("Accepted", 1), ("Accepted", 2)]


async def test_large_bodies_are_stored_once_as_blobs(database: str) -> None:
    async with running(database) as (store, acceptor):
        await deploy(store, "flow")
        big = bytes(range(256)) * (INLINE_BODY_LIMIT // 256 + 1)
        edge = b"e" * INLINE_BODY_LIMIT
        outcomes = await acceptor.accept_many(
            [mail("flow", body=big), mail("flow", body=big), mail("flow", body=edge)]
        )
        assert all(isinstance(o, Accepted) for o in outcomes)
        stored = await query(
            store,
            "SELECT body IS NULL, body_digest, body_size FROM workflow_run_dispatch ORDER BY seq",
        )
        digest = "sha256:" + hashlib.sha256(big).hexdigest()
        assert stored == [(1, digest, len(big)), (1, digest, len(big)), (0, None, len(edge))]
        assert await query(
            store, "SELECT digest, size, data = ? FROM blob WHERE size = ?", big, len(big)
        ) == [(digest, len(big), 1)]


async def test_one_broken_trigger_does_not_fail_its_batch(database: str) -> None:
    async with running(database) as (store, acceptor):
        await deploy(store, "good")
        bad = await deploy(store, "bad")
        assert isinstance(await acceptor.accept(mail("bad")), Accepted)
        # A corrupt counter would reuse seq 1: UNIQUE (deployment_id, seq) refuses it.
        await execute(store, "UPDATE deployment SET next_seq = 1 WHERE id = ?", bad)
        outcomes = await acceptor.accept_many([mail("good"), mail("bad"), mail("good")])
        assert [type(o).__name__ for o in outcomes] == ["Accepted", "AcceptFailed", "Accepted"]
        counts = await query(
            store,
            "SELECT p.name, COUNT(*) FROM workflow_run_dispatch d JOIN deployment p"
            " ON p.id = d.deployment_id GROUP BY 1 ORDER BY 1",
        )
        assert counts == [("bad", 1), ("good", 2)]


async def test_a_broken_trigger_alone_fails_by_itself_and_leaves_nothing(database: str) -> None:
    async with running(database) as (store, acceptor):
        bad = await deploy(store, "bad")
        assert isinstance(await acceptor.accept(mail("bad")), Accepted)
        await execute(store, "UPDATE deployment SET next_seq = 1 WHERE id = ?", bad)
        # Alone in its transaction, without a savepoint: the same answer.
        (outcome,) = await acceptor.accept_many([mail("bad", subject="again")])
        assert type(outcome).__name__ == "AcceptFailed"
        assert await query(store, "SELECT COUNT(*) FROM workflow_run_dispatch") == [(1,)]
        assert await query(store, "SELECT next_seq FROM deployment WHERE id = ?", bad) == [(1,)]
        await deploy(store, "good")
        assert isinstance(await acceptor.accept(mail("good")), Accepted)


async def test_a_failed_transaction_answers_no_one_accepted(tmp_path: Path) -> None:
    async with running(str(tmp_path / "hub.db")) as (store, acceptor):
        await deploy(store, "flow")
        ((pages,),) = await rows(store, "PRAGMA page_count")
        # The file may not grow: the blob insert fails mid-transaction, so the
        # small triggers batched with it must not be reported accepted either.
        await execute(store, f"PRAGMA max_page_count = {pages}")
        results: list[object] = []

        async def send(trigger: Trigger) -> None:
            try:
                results.append(await acceptor.accept(trigger))
            except StoreUnavailable as exc:
                results.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(send, mail("flow", body=b"x" * (INLINE_BODY_LIMIT * 4)))
            for _ in range(3):
                tg.start_soon(send, mail("flow", body=b"small"))
        accepted = [r for r in results if isinstance(r, Accepted)]
        stored = await query(store, "SELECT id FROM workflow_run_dispatch")
        assert {a.dispatch_id for a in accepted} <= {d for (d,) in stored}
        assert any(isinstance(r, StoreUnavailable) for r in results)
        await execute(store, "PRAGMA max_page_count = 1073741823")
        assert isinstance(await acceptor.accept(mail("flow")), Accepted)  # it recovers


async def test_a_batch_of_large_bodies_commits_as_heavy(tmp_path: Path) -> None:
    from hub.intake import HEAVY_BYTES

    async with running(str(tmp_path / "hub.db")) as (store, acceptor):
        await deploy(store, "flow")
        heavy: list[bool] = []
        transact = store.transact

        async def record(body: Any, **kw: Any) -> Any:
            heavy.append(kw.get("heavy", False))
            return await transact(body, **kw)

        store.transact = record  # type: ignore[method-assign]
        small = await acceptor.accept(mail("flow", body=b"small"))
        big = await acceptor.accept_many(
            [mail("flow", body=b"x" * (HEAVY_BYTES // 2 + 1)) for _ in range(2)]
        )
        assert heavy == [False, True]  # off the loop's thread: it holds the loop no longer
        stored = {d for (d,) in await query(store, "SELECT id FROM workflow_run_dispatch")}
        assert isinstance(small, Accepted) and small.dispatch_id in stored
        assert all(isinstance(b, Accepted) and b.dispatch_id in stored for b in big)


async def test_a_locked_store_answers_store_unavailable(tmp_path: Path) -> None:
    async with running(str(tmp_path / "hub.db"), busy_timeout=0.1) as (store, acceptor):
        await deploy(store, "flow")
        other = sqlite3.connect(tmp_path / "hub.db", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # holds the write lock past busy_timeout
        try:
            with pytest.raises(StoreUnavailable):
                await acceptor.accept(mail("flow", message_id="m"))
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert await query(store, "SELECT COUNT(*) FROM workflow_run_dispatch") == [(0,)]
        retry = await acceptor.accept(mail("flow", message_id="m"))
        assert isinstance(retry, Accepted) and not retry.duplicate


async def test_callers_get_shutting_down_after_the_acceptor_stops(database: str) -> None:
    from hub._errors import HubShuttingDown

    async with running(database) as (store, acceptor):
        await deploy(store, "flow")
    with pytest.raises(HubShuttingDown):
        await acceptor.accept(mail("flow"))


async def test_on_accepted_is_told_which_deployments_got_work(database: str) -> None:
    async with running(database) as (store, acceptor):
        woken: list[set[str]] = []
        acceptor.on_accepted = woken.append
        dep = await deploy(store, "flow")
        await acceptor.accept_many([mail("flow"), mail("nobody")])
        await acceptor.accept(mail("nobody"))
        assert woken == [{dep}]


async def test_the_census_counts_what_waits_per_deployment(database: str) -> None:
    async with running(database) as (store, acceptor):
        one, two = await deploy(store, "one"), await deploy(store, "two")
        assert await store.read(count_reserved) == {}
        before = time.time()
        for name, n in (("one", 3), ("two", 2)):
            for i in range(n):
                await acceptor.accept(mail(name, body=b"%d" % i))
        await store.transact(lambda tx: tx.execute(SET_STATUS, ("delivered", one, 1)))
        counts = await store.read(count_reserved)
        assert {d: n for d, (n, _) in counts.items()} == {one: 2, two: 2}
        assert all(before - 1 <= oldest <= time.time() for _, oldest in counts.values())


async def test_dispatch_counts_by_status_match_a_count_of_the_rows(database: str) -> None:
    async with running(database) as (store, acceptor):
        one, two = await deploy(store, "one"), await deploy(store, "two")
        for name, n in (("one", 6), ("two", 3)):
            for i in range(n):
                await acceptor.accept(mail(name, body=b"%d" % i))
        for status, dep, seqs in (
            ("delivered", one, (1, 2)),
            ("processed", one, (3, 4)),
            ("cancelled", one, (5,)),
            ("processed", two, (1,)),
            ("parked", two, (2,)),
        ):
            for seq in seqs:
                await store.transact(lambda tx, row=(status, dep, seq): tx.execute(SET_STATUS, row))
        rows = await query(store, "SELECT status, COUNT(*) FROM workflow_run_dispatch GROUP BY 1")
        counts = await store.read(count_by_status)
        assert counts["dispatches"] == {"reserved": 0, "cancelled": 0, "parked": 0, **dict(rows)}
        assert counts["dispatches"] == {
            "reserved": 2, "delivered": 2, "processed": 3, "cancelled": 1, "parked": 1,
        }  # fmt: skip
        assert counts["deployments"] == {"deployed": 2}
