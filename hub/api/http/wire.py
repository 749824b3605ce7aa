"""The bytes of an HTTP/1.1 answer: status lines, the ``date`` header, a
response head, and the server's own refusals.

A refusal the server answers itself (a request it cannot parse, a head too
large, no room for another request, an application that failed) is plain
text, closes its connection, and is logged once, the same way for each:
:func:`refusal`.
"""

from __future__ import annotations

import logging
import time
from email.utils import formatdate
from http import HTTPStatus

log = logging.getLogger("mailrun.hub.http")

STATUS_LINES = {
    int(status): b"HTTP/1.1 %d %s\r\n" % (status, status.phrase.encode("ascii"))
    for status in HTTPStatus
}
JSON_TYPE = b"content-type: application/json\r\n"


def status_line(status: int) -> bytes:
    line = STATUS_LINES.get(status)
    return line if line is not None else b"HTTP/1.1 %d \r\n" % status


class _Date:
    """The ``date`` header, formatted once a second."""

    def __init__(self) -> None:
        self._second = 0
        self._header = b""

    def header(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._header = b"date: %s\r\n" % formatdate(now, usegmt=True).encode("ascii")
        return self._header


date = _Date()


def json_answer(status: int, body: bytes, *, keep_alive: bool) -> bytes:
    """A whole answer with a JSON body, in one piece (one write, one segment)."""
    close = b"" if keep_alive else b"connection: close\r\n"
    return b"%s%s%scontent-length: %d\r\n%s\r\n%s" % (
        status_line(status),
        date.header(),
        JSON_TYPE,
        len(body),
        close,
        body,
    )


def refusal(status: int, text: str, *, why: str | None = None) -> bytes:
    """The server's own answer ``status`` with ``text``, closing the
    connection; logged as a warning (``why``: what the log says, if not the text)."""
    log.warning("HTTP %d: %s", status, why or text)
    body = text.encode("utf-8")
    return (
        b"%s%scontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
        b"connection: close\r\n\r\n%s" % (status_line(status), date.header(), len(body), body)
    )
