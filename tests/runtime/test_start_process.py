"""start_process: what a hub or sidecar reads from its environment at its
start, read once, with the same rules in both."""

from __future__ import annotations

import pytest

from runtime import ProcessSettings, start_process
from runtime.config import BACKOFF_MAX_ENV, LOG_LEVEL_ENV, LOOP_ENV, SQLITE_SYNCHRONOUS_ENV


def test_unset_is_the_defaults_of_a_normal_process() -> None:
    settings = start_process({})
    assert settings.log_level == "INFO"
    assert settings.backoff_max is None
    assert settings.sqlite_synchronous == "FULL"
    assert settings == ProcessSettings(backend_options=settings.backend_options)


def test_each_variable_is_read_once_into_the_settings(caplog: pytest.LogCaptureFixture) -> None:
    environ = {
        LOG_LEVEL_ENV: " debug ",
        LOOP_ENV: "asyncio",
        BACKOFF_MAX_ENV: "0.01",
        SQLITE_SYNCHRONOUS_ENV: "normal",
    }
    assert start_process(environ) == ProcessSettings(
        log_level="DEBUG", backend_options={}, backoff_max=0.01, sqlite_synchronous="NORMAL"
    )
    # The two that make a process unlike a normal one are said as it starts.
    said = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert BACKOFF_MAX_ENV in said and SQLITE_SYNCHRONOUS_ENV in said


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (LOG_LEVEL_ENV, "chatty"),
        (LOOP_ENV, "trio"),
        (BACKOFF_MAX_ENV, "soon"),
        (SQLITE_SYNCHRONOUS_ENV, "OFF"),
    ],
)
def test_a_value_that_makes_no_sense_is_refused_naming_its_variable(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name):
        start_process({name: value})
