"""The hub link: the loop that keeps a session with the hub, and the one
way every request to the hub goes (the hello exchange is ``_hello``'s, the
requests made under the session ``_requests``').

One owned loop keeps a session: it says hello, keeps the Welcome, and then
sleeps until something says the session may be gone: a HubBoot from a hub
with another boot id, a transport reconnect, or a Refused{unknown_session |
stale_epoch} from any request. Failures back off with jitter, capped at
about a second, so a restarted hub sees its sidecars back well within 2 s;
so does a session that ends as soon as it began (refused again at once):
hellos never come faster than the backoff allows, whatever asks for them.
The old session is kept until a new Welcome replaces it; a Welcome whose
handling fails (the sidecar could not adopt the hub's state) does not become
the session, and the loop says hello again.

A Refused{owner_conflict} to a hello (another process owns the deployment)
or {deployment_not_live | unknown_deployment} (it was deleted) is final:
``run`` raises it (:class:`FencedOut`) and the process stops.

A HubBoot from another hub also abandons every request in flight: the hub
that was asked is gone and its answer will never come, so waiting out the
request timeout would only delay the resend (every request is idempotent).

Every request, and a hello up to the session it makes, is work in progress
on the sidecar's :class:`Activity`: a sidecar never asks to sleep (``Sleep``,
:meth:`HubLink.sleep`) while it waits for the hub.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from runtime import (
    Asleep,
    Backoff,
    Claim,
    FrameDecodeError,
    FrameDecoder,
    HubBoot,
    Reason,
    Refused,
    Retry,
    RunSnapshot,
    Subjects,
    Transport,
    TransportError,
    Wakeup,
    Welcome,
    encode,
)
from runtime.loops import Broadcast

from .._errors import (
    DeploymentGone,
    FencedOut,
    HubRefused,
    HubUnavailable,
)
from ._activity import Activity
from ._hello import Identity, say_hello
from ._hello import Session as Session  # the link's users take it from here too
from ._requests import HubRequests

log = logging.getLogger("mailrun.sidecar.link")

REHELLO_REASONS = frozenset({Reason.UNKNOWN_SESSION, Reason.STALE_EPOCH})


class HubLink:
    def __init__(
        self,
        *,
        transport: Transport,
        subjects: Subjects,
        identity: Identity,
        takeover: bool = False,
        hello_timeout: float = 1.0,
        request_timeout: float = 2.0,
        backoff: Backoff = Backoff(),
        on_welcome: Callable[[Welcome], Awaitable[None]] | None = None,
        activity: Activity | None = None,
    ) -> None:
        self.transport = transport
        self.subjects = subjects
        self.identity = identity
        self.session: Session | None = None
        self._takeover = takeover
        self._hello_timeout = hello_timeout
        self._request_timeout = request_timeout
        self._backoff = backoff
        self._wake = Wakeup()
        self.told_gone = False
        """A Fenced notice said the deployment is not live. Alone it only
        makes a hello (anyone who can publish on the subject could send one);
        with NATS refusing the identity as well, this process stops."""
        self._changed = Broadcast()  # self.session was replaced
        self._on_welcome = on_welcome
        self._in_flight: set[anyio.CancelScope] = set()
        self._earlier: deque[Session] = deque(maxlen=8)  # sessions this process had before
        self._helloing = False  # a hello is in flight: it answers every refusal meanwhile
        self.activity = activity if activity is not None else Activity()
        self._requests = HubRequests(
            request=self.request,
            require_session=self._require_session,
            identity=identity,
            subjects=subjects,
            request_timeout=request_timeout,
        )

    # --- session --------------------------------------------------------------

    def rehello(self) -> None:
        """Say hello again soon (the session may be gone)."""
        self._wake.set()

    async def wait_session(self, timeout: float) -> Session | None:
        with anyio.move_on_after(timeout):
            while self.session is None:
                await self._changed.wait()
        return self.session

    async def wait_new_session(self, old: Session | None, timeout: float) -> None:
        """Until a session other than ``old`` is established, or ``timeout``."""
        with anyio.move_on_after(timeout):
            while self.session is None or self.session == old:
                await self._changed.wait()

    def holds(self, session_id: str | None) -> bool:
        """Whether ``session_id`` is this process's session: the current one, or
        an earlier one at the current epoch (the hub may have stamped a frame
        just before this process said hello again). A session id that the hub
        never gave this process is not its, whatever the frame says."""
        current = self.session
        if current is None or not session_id:
            return False
        if session_id == current.session_id:
            return True
        return any(
            s.session_id == session_id and s.owner_epoch == current.owner_epoch
            for s in self._earlier
        )

    async def run(self) -> None:
        """Keep a session forever; raises :class:`FencedOut` when this process may
        no longer act for the deployment."""
        self.transport.on_reconnect(self._on_reconnect)
        # Hellos that failed in a row; sessions that ended soon after they began.
        hello, churn = Retry(self._backoff), Retry(self._backoff)
        last_problem = ""
        while True:
            self._wake.clear()  # this hello answers every request for one so far
            # A hello up to its session is work: no Sleep is asked meanwhile.
            with self.activity.busy():
                try:
                    self._helloing = True
                    try:
                        welcome = await say_hello(
                            self.request,
                            self.subjects.hello,
                            self.identity,
                            takeover=self._takeover,
                            timeout=self._hello_timeout,
                        )
                    finally:
                        self._helloing = False
                except FencedOut:
                    raise
                except (HubRefused, HubUnavailable) as exc:
                    if self.told_gone and self.transport.credentials_refused:
                        # The hub said the deployment is gone and NATS no longer
                        # admits its identity: two signals no third party can
                        # give together. Its hello would never be answered.
                        raise DeploymentGone(
                            Reason.DEPLOYMENT_NOT_LIVE,
                            "the hub said the deployment was deleted and NATS revoked its identity",
                        ) from exc
                    if str(exc) != last_problem:
                        log.warning("hello failed, retrying: %s", exc)
                        last_problem = str(exc)
                    hello.failed()
                    await hello.wait(self._wake.wait)
                    continue
                hello.succeeded()
                last_problem = ""
                self.told_gone = False  # welcome after all: the notice was not the hub's last word
                # Only the first claim may take ownership over; later hellos just
                # renew the session of the owner this instance now is.
                self._takeover = False
                log.info(
                    "session %s (epoch %d, hub boot %s)",
                    welcome.session_id,
                    welcome.owner_epoch,
                    welcome.hub_boot_id,
                )
                if self._on_welcome is not None:
                    try:
                        await self._on_welcome(welcome)
                    except Exception:
                        # Not the session yet: nothing is shipped under it before
                        # the sidecar is ready to act as the owner.
                        log.exception("handling the welcome failed; saying hello again")
                        hello.failed()
                        await hello.wait(self._wake.wait)
                        continue
                if self.session is not None:
                    self._earlier.append(self.session)
                self.session = Session(welcome.session_id, welcome.owner_epoch, welcome.hub_boot_id)
                self._changed.notify()
            began = anyio.current_time()
            await self._wake.wait()
            if anyio.current_time() - began < self._backoff.maximum:
                churn.failed()
                await churn.wait()
            else:
                churn.succeeded()

    async def watch_announcements(self) -> None:
        """Re-hello at once when a hub with another boot id announces itself."""
        decoder: FrameDecoder[HubBoot] = FrameDecoder(HubBoot)
        subscription = await self.transport.subscribe(self.subjects.announce)
        async for message in subscription:
            try:
                boot = decoder.decode(message.data)
            except FrameDecodeError as exc:
                log.warning("ignoring an unreadable announcement: %s", exc)
                continue
            if self.session is None or boot.boot_id != self.session.hub_boot_id:
                log.info("hub %s booted; saying hello again", boot.boot_id)
                for scope in self._in_flight:
                    scope.cancel()
                self.rehello()

    async def _on_reconnect(self) -> None:
        self.rehello()

    # --- requests -------------------------------------------------------------

    async def request(
        self, subject: str, frame: Any, decoder: FrameDecoder[Any], timeout: float
    ) -> Any:
        """One request to the hub; transport trouble becomes :class:`HubUnavailable`,
        and a Refused asking for a new session triggers a re-hello."""
        data = None
        with self.activity.busy(), anyio.CancelScope() as scope:
            self._in_flight.add(scope)
            try:
                data = await self.transport.request(subject, encode(frame), timeout)
            except (TransportError, TimeoutError) as exc:
                raise HubUnavailable(f"{subject}: {type(exc).__name__}: {exc}") from exc
            finally:
                self._in_flight.discard(scope)
        if data is None:
            raise HubUnavailable(f"{subject}: abandoned, the hub restarted")
        try:
            reply = decoder.decode(data)
        except FrameDecodeError as exc:
            raise HubUnavailable(f"{subject}: {type(exc).__name__}: {exc}") from exc
        if isinstance(reply, Refused) and reply.reason in REHELLO_REASONS and self._current(frame):
            self.rehello()
        return reply

    def _current(self, frame: Any) -> bool:
        """Whether a refusal of ``frame`` is news: it went under the session
        this process holds, and no hello is on its way already. After a hub
        restart the frames in flight to the old hub come back refused while
        the new hello is in flight or just after its welcome; a hello for
        each replaced a session that was fine (a second round of hellos from
        every sidecar; the resends go under the new session anyway)."""
        if self._helloing:
            return False
        stamped = getattr(frame, "session_id", None)
        return stamped is None or self.session is None or stamped == self.session.session_id

    def _require_session(self) -> Session:
        if self.session is None:
            raise HubUnavailable("no session with the hub yet")
        return self.session

    async def fetch_blob(self, claim: Claim) -> bytes:
        """Fetch a claim-checked body chunk by chunk and verify size and sha256."""
        return await self._requests.fetch_blob(claim)

    async def mint_child(self, parent_run_id: str, request_id: str) -> str:
        """Ask the hub to mint a child run (idempotent per request id)."""
        return await self._requests.mint_child(parent_run_id, request_id)

    async def sleep(self) -> Asleep | Refused:
        """Ask the hub to let this process stop: :meth:`HubRequests.sleep`."""
        return await self._requests.sleep()

    async def fetch_state(self, welcome: Welcome) -> tuple[list[RunSnapshot], int, list[int]]:
        """Every run's state as the hub applied it, asked under ``welcome``'s
        session: :meth:`HubRequests.fetch_state`."""
        return await self._requests.fetch_state(welcome)
