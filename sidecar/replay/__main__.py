"""``python -m sidecar.replay``: the scratch process of ``mailrun replay``.

It reads one replay job (JSON) on stdin and answers with one JSON document
on stdout: the report (exit 0), or why the replay could not be made
(exit 1). The hub starts it; see :mod:`sidecar.replay._run` and docs/replay.md.
"""

from __future__ import annotations

import sys

from ._run import main

if __name__ == "__main__":
    sys.exit(main())
