"""Every whole system here starts `mailrun up` and its hub, and most run
the CLI: their bytecode is written once, before the first of them
(tests/support/launch/bytecode.py)."""

from __future__ import annotations

import pytest

from tests.support.launch.bytecode import compile_product


@pytest.fixture(scope="session", autouse=True)
def product_bytecode() -> None:
    compile_product()
