"""What loading a deployment's workflow costs a sidecar's start, alone.

    .venv/bin/python bench/wakes/workflow_load.py [--files 1] [--starts 200] [--json]

Each start does what a sidecar's boot does with its record's sources
(``sidecar.load_workflow``): lays them out under the state dir's ``src/``
and imports the entrypoint's module as a fresh package; the same sources
every time, as on every wake. The workflow is ``--files`` modules (the
entrypoint imports the others), each a few hundred lines. Prints the CPU of
a start (``time.process_time``, the median of five rounds of ``--starts``)
and what is left on disk. Run with ``PYTHONPATH`` on another checkout to
price its code; bytecode is written as in a sidecar, whatever
``PYTHONDONTWRITEBYTECODE`` says.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from runtime import Sources
from sidecar import load_workflow

DEPLOYMENT = "dep_" + "b" * 26


def module(n: int) -> str:
    """A module of about 300 lines: functions and a class, as a workflow has."""
    body = [f'"""Helper module {n}."""', "", "import json", ""]
    for k in range(40):
        body += [
            f"def step_{k}(item, state):",
            f"    value = state.get('k{k}', 0) + {k}",
            "    if value % 3 == 0:",
            "        return json.dumps({'value': value, 'subject': getattr(item, 'subject', '')})",
            "    return value",
            "",
        ]
    body += ["class Flow:", "    def __init__(self):", "        self.seen = []", ""]
    return "\n".join(body) + "\n"


def sources(files: int) -> Sources:
    modules = {f"helper{n}.py": module(n) for n in range(files - 1)}
    imports = "".join(f"from . import helper{n}\n" for n in range(files - 1))
    flow = imports + module(files - 1) + "\nasync def main(ctx, item):\n    return None\n"
    return Sources(entrypoint="flow:main", files={**modules, "flow.py": flow})


def round_ms(code: Sources, src: Path, starts: int) -> float:
    started = time.process_time()
    for _ in range(starts):
        load_workflow(code, src, DEPLOYMENT)
    return (time.process_time() - started) / starts * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1)
    parser.add_argument("--starts", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.files < 1 or args.starts < 1:
        parser.error("--files and --starts must be positive")
    sys.dont_write_bytecode = False  # as in a sidecar
    code = sources(args.files)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        load_workflow(code, src, DEPLOYMENT)  # the deployment's first start
        rounds = [round_ms(code, src, args.starts) for _ in range(5)]
        left = sorted(str(p.relative_to(tmp)) for p in Path(tmp).rglob("*") if p.is_file())
    figures = {
        "files": args.files,
        "starts": args.starts,
        "cpu_ms_per_start": round(statistics.median(rounds), 3),
        "rounds_ms": [round(r, 3) for r in rounds],
        "left_on_disk": left,
    }
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print(
            f"{args.files} file(s): {figures['cpu_ms_per_start']} ms of CPU a start"
            f" (rounds {figures['rounds_ms']}); on disk: {', '.join(left)}"
        )


if __name__ == "__main__":
    main()
