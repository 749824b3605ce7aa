"""Storage reaches a steady state: a second round of mail adds its rows, not its bodies."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.config import RUN_HISTORY_ENV

from .storage import rounds

pytestmark = pytest.mark.anyio


async def test_two_rounds_of_big_mails_leave_the_storage_about_where_one_did(
    tmp_path: Path,
) -> None:
    first, second = await rounds(tmp_path, 2, 100, 300_000, env={RUN_HISTORY_ENV: "4"})
    print(f"after 100 mails: {first}\nafter 200 mails: {second}")
    # 30 MB of bodies went through in each round.
    assert second.hub < first.hub * 1.25
    assert second.sidecar < first.sidecar * 1.25
    assert second.rows["inbox rows"] == 200  # every dispatch is still known here
    assert second.rows["hub dispatches"] == 200  # and there
    assert second.rows["hub blobs"] == 0
    assert second.rows["hub events whole"] == 4  # the run's history, as configured
