"""``python -m hub``: run the hub process (its argv contains "hub")."""

from __future__ import annotations

import argparse
from pathlib import Path

from ._server import DEFAULT_MAX_BODY, run_hub_cli


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m hub", description="Run the mailrun hub.")
    parser.add_argument("--state-dir", type=Path, required=True, help="holds hub.db")
    parser.add_argument("--http", default="127.0.0.1:8470", help="HOST:PORT to serve HTTP on")
    parser.add_argument("--nats", default="nats://127.0.0.1:4222", help="NATS server URL")
    parser.add_argument(
        "--sidecar-root", type=Path, help="write new deployments' restore records under here"
    )
    parser.add_argument("--subject-prefix", default="mailrun")
    parser.add_argument("--domain", default="mailrun.local", help="mail domain of deployments")
    parser.add_argument("--max-body", type=int, default=DEFAULT_MAX_BODY, help="bytes per mail")
    args = parser.parse_args(argv)
    run_hub_cli(
        state_dir=args.state_dir,
        http=args.http,
        nats_url=args.nats,
        sidecar_root=args.sidecar_root,
        subject_prefix=args.subject_prefix,
        domain=args.domain,
        max_body=args.max_body,
    )


if __name__ == "__main__":
    main()
