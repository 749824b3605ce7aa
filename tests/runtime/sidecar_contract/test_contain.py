"""Workflow containment: the environment a sidecar gets and its resource limits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import NATS_URL_ENV, sidecar_env
from runtime.config import BACKOFF_MAX_ENV
from runtime.sidecar_contract import (
    DEFAULT_SIDECAR_MAX_FILES,
    DEFAULT_SIDECAR_MAX_MEMORY,
    SIDECAR_MAX_FILES_ENV,
    SIDECAR_MAX_MEMORY_ENV,
    SIDECAR_PASS_ENV,
    Limits,
)


def test_a_sidecar_gets_only_what_it_needs(tmp_path: Path) -> None:
    operator = {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONPATH": "/src/mailrun",
        NATS_URL_ENV: "nats://u:p@h:4222",
        "MAILRUN_LOG_LEVEL": "DEBUG",
        BACKOFF_MAX_ENV: "0.01",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "MAILRUN_TOKEN": "admin",
        "HOME": "/home/operator",
        "SSH_AUTH_SOCK": "/tmp/agent",
    }
    env = sidecar_env(operator, home=tmp_path)
    assert env == {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONPATH": "/src/mailrun",
        NATS_URL_ENV: "nats://u:p@h:4222",
        "MAILRUN_LOG_LEVEL": "DEBUG",
        BACKOFF_MAX_ENV: "0.01",
        "HOME": str(tmp_path),
    }
    assert sidecar_env(env, home=tmp_path) == env  # a second pass changes nothing


def test_the_operator_may_pass_named_variables_on(tmp_path: Path) -> None:
    operator = {SIDECAR_PASS_ENV: "API_KEY, OTHER", "API_KEY": "k", "SECRET": "s"}
    env = sidecar_env(operator, home=tmp_path)
    assert env == {SIDECAR_PASS_ENV: "API_KEY, OTHER", "API_KEY": "k", "HOME": str(tmp_path)}


def test_limits_come_from_the_environment() -> None:
    assert Limits.from_env({}) == Limits(DEFAULT_SIDECAR_MAX_MEMORY, DEFAULT_SIDECAR_MAX_FILES)
    env = {SIDECAR_MAX_MEMORY_ENV: "1073741824", SIDECAR_MAX_FILES_ENV: "0"}
    assert Limits.from_env(env) == Limits(address_space=2**30, open_files=None)
    with pytest.raises(ValueError, match=SIDECAR_MAX_FILES_ENV):
        Limits.from_env({SIDECAR_MAX_FILES_ENV: "lots"})


@pytest.mark.slow  # a real child process
def test_limits_apply_to_the_process_hard_and_soft() -> None:
    # In a child: limits cannot be raised again in the process that set them.
    code = (
        "import json, resource; from runtime.sidecar_contract import Limits;"
        " Limits(address_space=2**31, open_files=256).apply();"
        " print(json.dumps([resource.getrlimit(resource.RLIMIT_AS),"
        " resource.getrlimit(resource.RLIMIT_NOFILE)]))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True).stdout
    assert json.loads(out) == [[2**31, 2**31], [256, 256]]
