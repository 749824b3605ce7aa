"""What collecting a test imports: a test of the runtime alone needs no hub,
sidecar, PostgreSQL or SMTP code (``tests/conftest.py`` and
``tests.support`` import their helpers when first used)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import REPO

NEEDLESS = ("hub", "sidecar", "asyncpg", "aiosmtpd", "cryptography")


@pytest.mark.slow  # a fresh Python process
def test_collecting_a_runtime_test_imports_no_hub_postgresql_or_smtp_code() -> None:
    probe = (
        "import sys; import tests.conftest, tests.support, tests.runtime.loops.test_backoff;"
        f" print(sorted(m for m in {NEEDLESS!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_helpers_are_there_when_asked_for() -> None:
    import tests.support as support

    for name in support.__all__:
        assert getattr(support, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = support.nothing  # type: ignore[attr-defined]
