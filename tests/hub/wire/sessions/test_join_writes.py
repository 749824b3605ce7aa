"""What a join writes and reads: the signed hello checked against the row
its Challenge read (no read of its own before the claim), the owner's own
hello again welcomed with nothing written (unless its deployment is asleep),
and claims and Sleeps waiting at the same moment committed together."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

from hub.store import Store
from hub.store.blob_io import BlobReader
from hub.store.sql import TxBody
from runtime import Challenge, Welcome, hello_message
from runtime.wire import Asleep, Sleep, sign
from tests.support.harnesses.wire import Hub, Sidecar, deploy, running_hub

pytestmark = pytest.mark.anyio

T = TypeVar("T")


def name_of(body: Callable[..., Any]) -> str:
    inner = getattr(body, "func", body)  # a functools.partial's function
    return str(getattr(inner, "__qualname__", repr(inner)))


class Counting(Store):
    """The hub's real store, each transaction's and read's body named as it runs."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.dialect, self.shared, self.path = store.dialect, store.shared, store.path
        self.transacts: list[str] = []
        self.reads: list[str] = []

    async def transact(self, body: TxBody[T], *, durable: bool = True, heavy: bool = False) -> T:
        self.transacts.append(name_of(body))
        return await self.store.transact(body, durable=durable, heavy=heavy)

    async def read(self, body: TxBody[T], *, heavy: bool = False) -> T:
        self.reads.append(name_of(body))
        return await self.store.read(body, heavy=heavy)

    def blob_reader(self) -> BlobReader:
        return self.store.blob_reader()

    async def release_free_pages(self, keep: int, *, slack: int = 0) -> int:
        return await self.store.release_free_pages(keep, slack=slack)

    async def aclose(self) -> None:
        await self.store.aclose()


def counted(hub: Hub) -> Counting:
    assert isinstance(hub.store, Counting)
    return hub.store


def data_version(path: Path) -> int:
    """SQLite's count of commits by other connections, as a new one sees it."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        (version,) = conn.execute("PRAGMA data_version").fetchone()
        return int(version)
    finally:
        conn.close()


async def signed_hello(car: Sidecar, challenge: Challenge) -> Any:
    message = hello_message(challenge.nonce, car.dep.id, car.instance_id)
    signed = car._hello(nonce=challenge.nonce, signature=sign(car.dep.seed, message))
    reply = await car.request(car.subjects.hello, signed)
    if isinstance(reply, Welcome):
        car.welcome = reply
    return reply


async def test_a_signed_hello_reads_no_row_before_its_claim(tmp_path: Path) -> None:
    async with running_hub(tmp_path, wrap=Counting) as hub:
        store = counted(hub)
        car = Sidecar(hub, await deploy(hub.store))
        challenge = await car.request(car.subjects.hello, car._hello())
        assert isinstance(challenge, Challenge)
        assert store.reads.count("read_owner") == 1
        store.reads.clear()
        store.transacts.clear()
        assert isinstance(await signed_hello(car, challenge), Welcome)
        # The key was checked against the row the Challenge read; the claim's
        # own transaction read it again.
        assert "read_owner" not in store.reads
        claims = [name for name in store.transacts if "HelloHandler" in name]
        assert len(claims) == 1, store.transacts
        row = await hub.one("SELECT owner_instance FROM deployment WHERE id = ?", car.dep.id)
        assert row["owner_instance"] == car.instance_id


async def test_the_owners_hello_again_writes_nothing(tmp_path: Path) -> None:
    async with running_hub(tmp_path, wrap=Counting) as hub:
        store = counted(hub)
        assert store.path is not None
        car = Sidecar(hub, await deploy(hub.store))
        first = await car.hello()
        assert isinstance(first, Welcome)
        store.transacts.clear()
        before = data_version(store.path)
        again = await car.hello()  # its first answer came after its timeout, say
        assert isinstance(again, Welcome)
        assert again.owner_epoch == first.owner_epoch
        assert again.session_id != first.session_id
        assert [name for name in store.transacts if "HelloHandler" in name] == []
        assert data_version(store.path) == before  # nothing committed
        current = hub.wire.sessions.current(car.dep.id)
        assert current is not None and current.session_id == again.session_id


async def test_the_owners_hello_again_wakes_its_deployment_if_asleep(tmp_path: Path) -> None:
    async with running_hub(tmp_path, wrap=Counting) as hub:
        car = Sidecar(hub, await deploy(hub.store))
        welcome = await car.hello()
        assert isinstance(welcome, Welcome)
        sleep = Sleep(deployment_id=car.dep.id, session_id=welcome.session_id, owner_epoch=1)
        assert isinstance(await car.request(car.subjects.sleep, sleep), Asleep)
        asleep = "SELECT 1 FROM deployment_sleep WHERE deployment_id = ?"
        assert await hub.one(asleep, car.dep.id) is not None
        # A hello that crossed the Sleep (a reconnect): the same instance,
        # welcomed under its epoch, and its deployment awake again.
        again = await car.hello()
        assert isinstance(again, Welcome)
        assert again.owner_epoch == 1
        assert await hub.one(asleep, car.dep.id) is None


class WriterHeld:
    """The store's writer held by a transaction of the test's, until let go."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.inside = threading.Event()
        self.go = threading.Event()

    def body(self, tx: Any) -> None:
        self.inside.set()
        self.go.wait(10)

    async def hold(self) -> None:
        await self.store.transact(self.body, heavy=True)


async def test_sleeps_waiting_together_share_a_commit_and_claims_do_not(tmp_path: Path) -> None:
    async with running_hub(tmp_path, wrap=Counting) as hub:
        store = counted(hub)
        cars = [Sidecar(hub, await deploy(hub.store, f"flow{n}")) for n in range(8)]
        challenges = [await car.request(car.subjects.hello, car._hello()) for car in cars]
        replies: list[Any] = []

        async def together(ask: Callable[[Sidecar, Any], Any], args: list[Any]) -> int:
            """Each car's request sent while the writer is held; the
            transactions they made."""
            replies.clear()
            held = WriterHeld(store.store)

            async def one(car: Sidecar, arg: Any) -> None:
                replies.append(await ask(car, arg))

            async with anyio.create_task_group() as tg:
                tg.start_soon(held.hold)
                assert await anyio.to_thread.run_sync(held.inside.wait, 10)
                store.transacts.clear()
                for car, arg in zip(cars, args, strict=True):
                    tg.start_soon(one, car, arg)
                await anyio.wait_all_tasks_blocked()
                held.go.set()
            return len(store.transacts)

        claims = await together(signed_hello, challenges)
        assert all(isinstance(reply, Welcome) for reply in replies), replies
        # Each claim decides after the one before it committed and opened
        # its session: one commit each.
        assert claims == len(cars)

        async def ask_sleep(car: Sidecar, _: Any) -> Any:
            session_id, epoch = car.session
            frame = Sleep(deployment_id=car.dep.id, session_id=session_id, owner_epoch=epoch)
            return await car.request(car.subjects.sleep, frame)

        sleeps = await together(ask_sleep, [None] * len(cars))
        assert all(isinstance(reply, Asleep) for reply in replies), replies
        assert sleeps <= 2
        asleep = await hub.all("SELECT deployment_id FROM deployment_sleep")
        assert len(asleep) == len(cars)


async def test_a_later_hello_welcomed_from_a_read_stays_current(tmp_path: Path) -> None:
    # A sidecar's hello (B) times out while its claim waits for the writer;
    # it says hello again (C), and the owner row, claimed by a hello before
    # (A), names it already: C is welcomed from a read, before B's claim
    # commits. The sidecar holds C's session; the hub must too.
    async with running_hub(tmp_path, wrap=Counting) as hub:
        store = counted(hub)
        car = Sidecar(hub, await deploy(hub.store))
        first = await car.request(car.subjects.hello, car._hello())
        second = await car.request(car.subjects.hello, car._hello())
        assert isinstance(first, Challenge) and isinstance(second, Challenge)
        assert isinstance(await signed_hello(car, first), Welcome)  # A: claimed
        held = WriterHeld(store.store)
        late: list[Any] = []

        async def hello_b() -> None:
            late.append(await signed_hello(car, second))

        async with anyio.create_task_group() as tg:
            tg.start_soon(held.hold)
            assert await anyio.to_thread.run_sync(held.inside.wait, 10)
            tg.start_soon(hello_b)  # its Challenge read no owner: a write, held
            await anyio.wait_all_tasks_blocked()
            third = await car.request(car.subjects.hello, car._hello())
            assert isinstance(third, Challenge)
            welcome_c = await signed_hello(car, third)
            assert isinstance(welcome_c, Welcome)
            held.go.set()
        (welcome_b,) = late
        assert isinstance(welcome_b, Welcome)
        assert welcome_b.owner_epoch == welcome_c.owner_epoch == 1
        current = hub.wire.sessions.current(car.dep.id)
        assert current is not None and current.session_id == welcome_c.session_id
