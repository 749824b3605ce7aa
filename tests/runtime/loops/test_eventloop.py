"""MAILRUN_LOOP: uvloop by default, asyncio on request, anything else refused."""

from __future__ import annotations

import anyio
import pytest

from runtime import running_loop
from runtime.config import LOOP_ENV
from runtime.loops import loop_options


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", "uvloop"), ("uvloop", "uvloop"), (" UVLOOP ", "uvloop"), ("asyncio", "asyncio")],
)
def test_the_loop_asked_for_is_the_loop_that_runs(value: str, expected: str) -> None:
    options = loop_options({LOOP_ENV: value} if value else {})

    async def name() -> str:
        return running_loop()

    assert anyio.run(name, backend_options=options) == expected


@pytest.mark.parametrize("bad", ["trio", "uv", "0"])
def test_an_unknown_loop_is_refused_naming_the_variable(bad: str) -> None:
    with pytest.raises(ValueError, match=f"{LOOP_ENV} must be uvloop or asyncio, got '{bad}'"):
        loop_options({LOOP_ENV: bad})
