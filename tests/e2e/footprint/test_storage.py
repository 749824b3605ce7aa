"""Storage reaches a steady state: a second round of mail adds its rows, not its bodies."""

from __future__ import annotations

from pathlib import Path

import pytest

from hub.wire import RetentionConfig
from runtime.config import RUN_HISTORY_ENV
from sidecar.storage import FREE_BYTES_KEPT

from .storage import rounds

pytestmark = pytest.mark.anyio

MAILS = 100
BODY = 300_000
ROWS_A_MAIL = 8 * 1024
"""What a mail's rows may add to a file (its dispatch, events, inbox row):
1.3-2.1 KiB measured, against a body of ``BODY`` bytes."""


async def test_two_rounds_of_big_mails_leave_the_storage_about_where_one_did(
    tmp_path: Path,
) -> None:
    first, second = await rounds(tmp_path, 2, MAILS, BODY, env={RUN_HISTORY_ENV: "4"})
    print(f"after {MAILS} mails: {first}\nafter {2 * MAILS} mails: {second}")
    # 30 MB of bodies went through in each round. The second added its rows
    # (a few KiB a mail), not its bodies; the free pages each file keeps for
    # reuse stay within their caps. (How far below its cap a round leaves a
    # file's free pages depends on how many bodies were alive at once, so a
    # file's whole size is no steady figure; its rows and its cap are.)
    assert second.hub_live - first.hub_live < MAILS * ROWS_A_MAIL
    assert second.sidecar_live - first.sidecar_live < MAILS * ROWS_A_MAIL
    assert second.hub_free <= RetentionConfig().free_bytes_kept
    assert second.sidecar_free <= FREE_BYTES_KEPT
    assert second.rows["inbox rows"] == 200  # every dispatch is still known here
    assert second.rows["hub dispatches"] == 200  # and there
    assert second.rows["hub blobs"] == 0
    assert second.rows["hub events whole"] == 4  # the run's history, as configured
