"""``started``: a wait for a process's start fails at once, and says why,
when the process has died."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from tests.support.launch.starts import started

pytestmark = pytest.mark.anyio


@pytest.mark.slow  # an OS process
async def test_a_process_that_dies_before_it_answers_fails_the_wait_with_its_code_and_log(
    tmp_path: Path,
) -> None:
    log = tmp_path / "child.log"
    script = "import sys; print('cannot open the store', flush=True); sys.exit(3)"
    with log.open("wb") as out:
        proc = await anyio.open_process([sys.executable, "-c", script], stdout=out)
    async with proc:
        # Far longer than the test may run (pytest's timeout): only the exit ends it.
        with pytest.raises(AssertionError) as failed:
            await started(
                lambda: False, exit_code=lambda: proc.returncode, logs=[log], timeout=3600,
                what="its answer",
            )  # fmt: skip
    message = str(failed.value)
    assert message.startswith("exited with 3 before its answer")
    assert "cannot open the store" in message


async def test_the_first_answer_is_returned_while_the_process_runs(tmp_path: Path) -> None:
    answers = iter([None, {}, {"boot_id": "boot_1"}])
    found = await started(
        lambda: next(answers), exit_code=lambda: None, timeout=10, what="an answer"
    )
    assert found == {"boot_id": "boot_1"}


async def test_a_timeout_shows_the_log(tmp_path: Path) -> None:
    log = tmp_path / "hub.log"
    log.write_text("waiting for the database\n")
    with pytest.raises(AssertionError, match=r"(?s)timed out after 0.1s.*waiting for the database"):
        await started(lambda: None, exit_code=lambda: None, logs=[log], timeout=0.1, what="x")
