"""The stub hub every CLI test talks to (tests/hub/cli/stubhub.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.hub.cli.stubhub import Stub, serve_stub


@pytest.fixture
def stub() -> Iterator[Stub]:
    with serve_stub() as state:
        yield state
