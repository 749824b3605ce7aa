"""Write a previous release's state dir, kept as tests/legacy/release<N>-state.tar.gz.

Run by hand, never by tests, with the PREVIOUS release's checkout (its
``mailrun``), so that the files are what that release wrote:

    git worktree add /tmp/release2 1034cea
    (cd /tmp/release2 && python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]')
    cd /tmp/release2 && .venv/bin/python /path/to/tests/legacy/make_release2_state.py /tmp/r2
    tar -C /tmp/r2/state --exclude=logs --exclude=__pycache__ --exclude='*.lock' \\
        -czf tests/legacy/release2-state.tar.gz .

It starts ``mailrun up`` there, deploys the e2e recorder as ``busy``, mails
it m0, m1 and m2, waits until the run has processed them, and stops
``up`` with SIGTERM (a clean stop: no WAL left beside the databases).
The releases they were made with: release2-state.tar.gz by 1034cea (hub
schema 15, inbox schema 4), release3-state.tar.gz by 2396dc4 (hub schema
17, inbox schema 5: failure policies, before timers and steps), the same
way with ``/tmp/release3`` and ``release3-state.tar.gz``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

RECORDER = Path(__file__).with_name("release2_recorder.txt")
PORT = 18871


def main(root: Path) -> None:
    state = root / "state"
    base = f"http://127.0.0.1:{PORT}"
    with (root / "up.out").open("w") as out:
        up = subprocess.Popen(
            [".venv/bin/mailrun", "up", "--state-dir", str(state), "--http", f"127.0.0.1:{PORT}"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def call(method: str, path: str, body: Any = None) -> Any:
        token = (state / "admin-token").read_text().strip()
        request = urllib.request.Request(
            base + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())

    deadline = time.monotonic() + 30
    while True:
        try:
            call("GET", "/healthz")
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)  # a script run by hand: the hub is starting
    source = RECORDER.read_text()
    dep = call(
        "POST",
        "/workflows/deployments",
        {"name": "busy", "source": source, "entrypoint": "flow:main"},
    )
    run_id = ""
    for i in range(3):
        mail = {"to": dep["address"], "subject": f"m{i}", "body": f"body {i}"}
        run_id = call("POST", "/mail", {**mail, "message_id": f"<m{i}@r2>"})["run_id"]
    while call("GET", f"/runs/{run_id}")["state"].get("count") != 3:
        time.sleep(0.1)
    print(json.dumps({"deployment": dep["id"], "run": run_id}))
    up.send_signal(signal.SIGTERM)
    up.wait(30)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
