"""Write the golden files listed in samples.py. Run by hand, never by tests:

    .venv/bin/python tests/golden/generate.py

Only missing files are written; an existing one is never rewritten. If the
bytes this release would write for an existing file differ, the format has
changed: keep the old file (its bytes must still decode, and
tests/runtime/wire/test_golden.py keeps checking that), and add the new samples as a new
version directory in samples.py. This script then exits 1 and names them.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.golden.samples import GOLDEN


def main() -> int:
    changed: list[str] = []
    for golden in GOLDEN:
        data = golden.write()
        if not golden.file.exists():
            golden.file.parent.mkdir(parents=True, exist_ok=True)
            golden.file.write_bytes(data)
            print(f"wrote   {golden.path} ({len(data)} bytes)")
        elif golden.file.read_bytes() != data:
            changed.append(golden.path)
            print(f"CHANGED {golden.path}: kept as it is; add a new version instead")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
