"""What a ``mailrun`` process imports before it runs a command: ``hub`` and
``hub.up`` import their names the first time they are read, and the CLI
imports the server, the store, the SMTP ingress, the relay and httpx only
inside the commands that use them (docs/testing.md, "What the suite costs").
And what a hub imports only once it uses it: the SMTP server with ``--smtp``,
dkimpy with a DKIM key, jinja2 with the console's first page, aiosmtplib
with the relay's first round.
"""

from __future__ import annotations

import ast
import importlib
import json
import smtplib
import subprocess
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import anyio
import pytest

import hub.cli.options
import hub.outbound
import hub.smtp
import hub.store
import hub.up
from hub.outbound import generate_key
from tests.support import REPO, NatsServerProcess, free_port
from tests.support.launch.hubs import LoneHub, lone_hub

LAZY = ("hub", "hub.up", "hub.outbound", "hub.smtp", "runtime")

# What a CLI process must not import to read its argv: each costs a tenth of
# a second or more, in every `mailrun` process the suite and operators start.
HEAVY = ("hub._server", "hub.api", "hub.store", "hub.intake", "hub.smtp", "hub.outbound", "httpx")
# And what neither the CLI nor `mailrun up` uses at all: the NATS client.
NATS = ("runtime.transport", "nats")
# What a hub uses only with --smtp (aiosmtpd and its attrs, the sender
# checks' pyspf), a DKIM key (dkimpy, dnspython, cryptography), a console
# page (jinja2) or a relay's first round (aiosmtplib): a tenth of a second or
# more of every hub's start without them.
FEATURES = ("aiosmtpd", "attr", "spf", "dkim", "dns", "cryptography", "jinja2", "aiosmtplib")


def type_checking_imports(package: str) -> dict[str, str]:
    """The names the package's ``if TYPE_CHECKING:`` block imports, and from where."""
    init = REPO / Path(*package.split(".")) / "__init__.py"
    found = {}
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom)
                for alias in imp.names:
                    found[alias.asname or alias.name] = "." * imp.level + (imp.module or "")
    return found


@pytest.mark.parametrize("package", LAZY)
def test_each_lazy_name_comes_from_where_mypy_is_told(package: str) -> None:
    module = importlib.import_module(package)
    assert type_checking_imports(package) == module._LAZY
    for name, source in module._LAZY.items():
        assert name in module.__all__
        origin = importlib.import_module(source, package)
        assert getattr(module, name) is getattr(origin, name)


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        _ = hub.up.nothing_here  # type: ignore[attr-defined]


def imported_by(code: str) -> set[str]:
    """The modules a fresh interpreter holds after ``code``."""
    probe = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    return set(json.loads(out))


def heavy(modules: set[str], names: tuple[str, ...] = HEAVY) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(f"{h}.") for h in names))


def test_the_cli_imports_no_server_store_or_http_client_to_read_its_argv() -> None:
    modules = imported_by("import hub.cli")
    assert "hub.cli.main" in modules
    assert heavy(modules) == []
    assert heavy(modules, NATS) == []


def test_up_runs_without_the_nats_client() -> None:
    # up only spawns nats-server and polls the hub over HTTP.
    modules = imported_by("import hub.cli.processes.up\nfrom hub.up import run_up")
    assert "hub.up.supervisor" in modules
    assert heavy(modules, NATS) == []


def test_the_commands_import_what_they_use_when_they_run() -> None:
    # The other side of the test above: the command still finds what it needs.
    modules = imported_by("from hub import Store")
    assert {"hub.store", "hub.store.opening"} <= modules
    assert "hub._server" not in modules


def test_the_clis_environment_names_are_the_packages() -> None:
    options = hub.cli.options
    assert options.DATABASE_ENV == hub.store.DATABASE_ENV
    assert options.SMTP_USER_ENV == hub.smtp.USER_ENV
    assert options.SMTP_PASSWORD_ENV == hub.smtp.PASSWORD_ENV
    assert options.RELAY_USER_ENV == hub.outbound.USER_ENV
    assert options.RELAY_PASSWORD_ENV == hub.outbound.PASSWORD_ENV
    assert options.RELAY_STARTTLS_ENV == hub.outbound.STARTTLS_ENV


def test_up_without_dkim_keys_reads_no_relay_to_check_them() -> None:
    # `mailrun up` checks its DKIM options before it starts anything; with
    # none given, importing the relay (about 0.4 s) only delayed nats-server.
    modules = imported_by("from hub.cli.options import check_dkim\nassert check_dkim((), ()) == ()")
    assert heavy(modules) == []


def test_the_hubs_server_imports_no_smtp_dkim_or_templates() -> None:
    modules = imported_by("import hub._server\nfrom hub import HubSettings, serve_hub")
    assert "hub._server" in modules
    assert heavy(modules, FEATURES) == []


def imports_in(log: str) -> set[str]:
    """The modules a process's ``-X importtime`` log names."""
    lines = (line.rsplit("|", 1) for line in log.splitlines() if line.startswith("import time:"))
    return {parts[1].strip() for parts in lines if len(parts) == 2}


def imports(hub: LoneHub) -> set[str]:
    """What ``hub`` imported so far: Python writes each import's line as it
    ends, unbuffered, where the log lines may wait in a queue."""
    return imports_in(hub.log.read_text())


def hub_process(
    tmp_path: Path, nats: NatsServerProcess, *options: str
) -> AbstractAsyncContextManager[LoneHub]:
    """``python -m hub`` with ``options``, its imports logged."""
    return lone_hub(tmp_path, nats.url, *options, env={"PYTHONPROFILEIMPORTTIME": "1"})


@pytest.mark.slow  # a real hub process
@pytest.mark.anyio
async def test_a_hub_without_smtp_or_dkim_serves_without_them_and_the_console_brings_jinja(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    async with hub_process(tmp_path, nats_server) as hub:
        at_start = imports(hub)  # once its /healthz answered
        assert "hub._server" in at_start
        assert heavy(at_start, FEATURES) == []
        page = await hub.client.http.get("/")
        assert page.status_code == 200 and "<title>Deployments" in page.text
        since = imports(hub) - at_start
        assert {"jinja2", "hub.api.console.rendering"} <= since
        assert heavy(since, tuple(f for f in FEATURES if f != "jinja2")) == []


@pytest.mark.slow  # a real hub process
@pytest.mark.anyio
async def test_a_hub_with_smtp_and_a_dkim_key_imports_them_and_answers_smtp(
    tmp_path: Path, nats_server: NatsServerProcess
) -> None:
    key = tmp_path / "dkim.pem"
    assert generate_key(key)
    smtp_port = free_port()
    options = ("--smtp", f"127.0.0.1:{smtp_port}", "--dkim-key", str(key), "--dkim-selector", "s1")
    async with hub_process(tmp_path, nats_server, *options) as hub:
        at_start = imports(hub)
        # (What importlib.import_module loads, as lazy names do, goes unlogged:
        # hub.smtp._server and hub.outbound._dkim; what they import is logged.)
        assert {"aiosmtpd", "dkim", "cryptography", "hub.smtp._handler"} <= at_start
        assert "jinja2" not in at_start

        def greeting() -> int:
            with smtplib.SMTP("127.0.0.1", smtp_port, timeout=30) as client:
                return client.ehlo("probe.test")[0]

        assert await anyio.to_thread.run_sync(greeting) == 250
