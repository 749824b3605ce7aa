"""Where the repository is: the cwd and PYTHONPATH of processes tests start."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
