"""The fork server's frames: what ``mailrun up`` asks of the process that forks
sidecars (``python -m sidecar.forking``), and what it answers.

Both ends hold one ``SOCK_SEQPACKET`` socket pair, created by ``up`` for each
start of the fork server and inherited by it: every frame is one packet (no
length prefix), read whole or not at all, in the order it was sent. A
:class:`Fork` carries the sidecar's log file as the packet's one descriptor
(``SCM_RIGHTS``), opened by ``up``, so that the fork server opens nothing of
a sidecar's by path.

The server answers each :class:`Fork` with :class:`Forked` (or
:class:`ForkRefused`) before anything else about that process, and relays
its end as :class:`Exited` once it has reaped it: ``up`` cannot wait for a
process that is not its child.
"""

from __future__ import annotations

from typing import Final

import msgspec

FORK_SERVER_MODULE: Final = "sidecar.forking"
"""``python -m`` this: the fork server. Its argv holds no element
``sidecar``: what looks for a sidecar by that word never takes it for one."""

FORK_MAX_FRAME: Final = 1 << 16
"""The largest frame either end reads: a sidecar's argv and environment."""

FORK_TITLE_ROOM: Final = 1024
"""Bytes of the fork server's argv kept for its sidecars' titles: a forked
process can name itself (``/proc/PID/cmdline``) only within the argv its
parent was executed with, and the environment's memory after it stays as
it is (``/proc/PID/environ``)."""


class Fork(msgspec.Struct, tag="fork", frozen=True):
    """Fork one sidecar; its log file comes with the frame."""

    ask: int  # the asker's number for this request, echoed in the answer
    argv: list[str]  # after ``python -m sidecar``: ``sidecar_argv``'s, as is
    env: dict[str, str]  # its whole environment: ``sidecar_env``'s
    cwd: str


class Forked(msgspec.Struct, tag="forked", frozen=True):
    ask: int
    pid: int


class ForkRefused(msgspec.Struct, tag="refused", frozen=True):
    """The fork failed (out of pids or memory): start it another way."""

    ask: int
    error: str


class Exited(msgspec.Struct, tag="exited", frozen=True):
    pid: int
    returncode: int  # as ``subprocess.Popen``'s: a signal's number negated


FromForkServer = Forked | ForkRefused | Exited

_encoder: Final = msgspec.msgpack.Encoder()
_to_server: Final = msgspec.msgpack.Decoder(Fork)
_from_server: Final = msgspec.msgpack.Decoder(FromForkServer)


def encode_frame(frame: Fork | Forked | ForkRefused | Exited) -> bytes:
    return _encoder.encode(frame)


def decode_request(data: bytes) -> Fork:
    """Raises ``msgspec.DecodeError`` (a ``ValueError``) for anything else."""
    return _to_server.decode(data)


def decode_answer(data: bytes) -> Forked | ForkRefused | Exited:
    """Raises ``msgspec.DecodeError`` (a ``ValueError``) for anything else."""
    return _from_server.decode(data)
