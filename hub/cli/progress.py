"""Progress of long work: a bar on a terminal, plain lines otherwise.

A bar redraws one line in place, which a log file or a CI transcript would
collect as a smear of carriage returns; there, progress is a line of its
own at each step (or each tenth of a long count) instead.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any, TextIO

import click

_CLEAR_LINE = "\r\033[K"


class Progress:
    """``total`` steps of ``label``: :meth:`advance_to` as they are done,
    :meth:`echo` for other lines meanwhile. Use it as a context manager."""

    def __init__(
        self,
        label: str,
        total: int,
        *,
        file: TextIO | None = None,
        every: float = 0.1,
    ) -> None:
        self.label = label
        self.total = max(1, total)
        self.done = 0
        self._file = file if file is not None else sys.stderr
        self.tty = self._file.isatty()
        # A line at every step of a short count, at every tenth of a long one.
        self._step = 1 if self.total <= 20 else max(1, int(self.total * every))
        self._bar: Any = None
        if self.tty:
            self._bar = click.progressbar(
                length=self.total, label=label, file=self._file, show_pos=True, width=30
            )

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.__enter__()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(kind, error, trace)

    def advance_to(self, done: int, note: str = "") -> None:
        """``done`` steps are done (never fewer than before); ``note`` says
        where things stand, on the plain line of this step."""
        done = min(max(done, self.done), self.total)
        if done == self.done:
            return
        crossed = done // self._step > self.done // self._step or done == self.total
        if self._bar is not None:
            self._bar.update(done - self.done)
        elif crossed:
            tail = f": {note}" if note else ""
            click.echo(f"{self.label} {done} of {self.total}{tail}", file=self._file)
        self.done = done

    def echo(self, line: str) -> None:
        """Print ``line``; on a terminal above the bar, which is drawn again."""
        if self._bar is None:
            click.echo(line, file=self._file)
            return
        click.echo(_CLEAR_LINE + line, file=self._file)
        self._bar.render_progress()


class Steps:
    """A :class:`Progress` whose total is known only at the first step
    (``steps(done, total, name)``, as migrations report); :meth:`close` it."""

    def __init__(self, label: str, *, file: TextIO | None = None) -> None:
        self._label = label
        self._file = file
        self._progress: Progress | None = None

    def __call__(self, done: int, total: int, name: str) -> None:
        if self._progress is None:
            self._progress = Progress(self._label, total, file=self._file).__enter__()
        self._progress.advance_to(done, name)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.__exit__(None, None, None)
