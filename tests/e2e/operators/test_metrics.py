"""GET /metrics of a real `mailrun up`: what each deployment's mail did,
counted per deployment, and the latencies as histograms."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support import REPO, wait_for

from ..harness import mailrun_up, recorder_source

pytestmark = pytest.mark.anyio


def samples(text: str) -> dict[str, float]:
    """Every sample line, by its name and labels."""
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


async def test_a_deployments_mail_is_counted_from_accept_to_processed(tmp_path: Path) -> None:
    async with mailrun_up(tmp_path) as up:
        dep = await up.deploy("orders", recorder_source())
        other = await up.deploy("quiet", recorder_source())
        receipts = [(await up.send(dep["address"], f"mail {i}")).json() for i in range(3)]
        await up.wait_state(receipts[0]["run_id"], lambda r: r["state"].get("count") == 3)
        assert (await up.send("nobody@mailrun.local", "lost")).status_code == 404
        mine = f'{{deployment="{dep["id"]}"}}'

        async def counted() -> dict[str, float] | None:
            # Processed is recorded when the sidecar's events are ingested.
            # The pending gauge is the census's: at most a second behind.
            got = samples((await up.http.get("/metrics")).text)
            done = got.get(f"mailrun_deployment_processed_total{mine}") == 3
            drained = got.get(f"mailrun_deployment_pending{mine}", 0) == 0
            return got if done and drained else None

        got = await wait_for(counted, what="three mails counted processed, none pending")
        assert got[f"mailrun_deployment_accepted_total{mine}"] == 3
        assert got[f"mailrun_deployment_delivered_total{mine}"] == 3
        # A frame carries one mail or several (those accepted while the one
        # before was out, or before the sidecar's hello).
        assert 1 <= got[f"mailrun_deployment_frames_total{mine}"] <= 3
        assert f'mailrun_deployment_accepted_total{{deployment="{other["id"]}"}}' not in got
        assert got['mailrun_triggers_rejected_total{reason="unknown_address"}'] == 1
        # One accept per mail (a rejected one too: it was answered by the acceptor).
        assert got["mailrun_accept_seconds_count"] == 4
        assert got['mailrun_accept_seconds_bucket{le="+Inf"}'] == 4
        assert got["mailrun_end_to_end_seconds_count"] == 3
        assert 0 < got["mailrun_end_to_end_seconds_sum"] < 60
        assert got[f"mailrun_sidecar_connected{mine}"] == 1
        assert "mailrun_nats_reconnects_total" in got
        # The example dashboard asks only for families the hub exports.
        text = (await up.http.get("/metrics")).text
        families = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
        dashboard = json.loads((REPO / "docs" / "grafana-dashboard.json").read_text())
        exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
        asked = {re.sub(r"_bucket$", "", m) for e in exprs for m in re.findall(r"mailrun_\w+", e)}
        assert len(asked) >= 10 and asked <= families, asked - families

        # A deleted deployment's series go with it.
        assert (await up.http.delete(f"/workflows/deployments/{dep['id']}")).status_code == 200
        after = samples((await up.http.get("/metrics")).text)
        assert f"mailrun_deployment_accepted_total{mine}" not in after
