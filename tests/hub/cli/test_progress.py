"""Progress (hub/cli/progress.py): a bar on a terminal, plain lines elsewhere."""

from __future__ import annotations

import io

from hub.cli.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_at_each_step_of_a_short_count() -> None:
    out = io.StringIO()
    with Progress("demo: processed", 4, file=out) as progress:
        progress.advance_to(1, "running")
        progress.echo("sent 'hi'")
        progress.advance_to(1)  # no step: no line
        progress.advance_to(4, "completed")
    assert out.getvalue().splitlines() == [
        "demo: processed 1 of 4: running",
        "sent 'hi'",
        "demo: processed 4 of 4: completed",
    ]
    assert "\r" not in out.getvalue()


def test_a_long_count_says_each_tenth_and_never_goes_back() -> None:
    out = io.StringIO()
    with Progress("mails", 1000, file=out) as progress:
        for done in range(0, 1001, 7):
            progress.advance_to(done)
        progress.advance_to(500)  # behind: ignored
        progress.advance_to(1000)
    lines = out.getvalue().splitlines()
    assert [int(line.split()[1]) // 100 for line in lines] == list(range(1, 11))
    assert lines[-1] == "mails 1000 of 1000"


def test_a_terminal_gets_a_bar_redrawn_in_place_with_lines_above_it() -> None:
    out = Terminal()
    with Progress("demo: processed", 4, file=out) as progress:
        progress.advance_to(2)
        progress.echo("sent 'hi'")
        progress.advance_to(4)
    text = out.getvalue()
    assert "\r" in text and "sent 'hi'" in text
    assert "4/4" in text.split("sent 'hi'")[-1]  # the bar drawn again after the line, to its end
    assert "demo: processed 2 of 4" not in text  # no plain lines on a terminal
