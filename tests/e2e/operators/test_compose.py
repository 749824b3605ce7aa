"""compose.yaml and the Dockerfile are consistent with each other and with the CLI."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlparse

import click
import pytest
import yaml

from hub.cli.main import main
from hub.store import DATABASE_ENV
from tests.support import REPO


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load((REPO / "compose.yaml").read_text())
    assert isinstance(data, dict)
    return data


def command_of(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    return command.split() if isinstance(command, str) else [str(c) for c in command]


def parse_mailrun(argv: list[str]) -> click.Context:
    """Parse a `mailrun ...` argv with the real click commands: unknown options,
    missing values or bad HOST:PORT values raise here."""
    assert argv[0] == "mailrun"
    assert isinstance(main, click.Group)
    command = main.commands.get(argv[1])
    assert command is not None, f"unknown mailrun command {argv[1]!r}"
    # Under the group's context, as `mailrun` runs it: a command parsed alone
    # would build (and click keep) a help option without the group's "-h".
    parent = click.Context(main, info_name="mailrun", **main.context_settings)
    return command.make_context(argv[1], argv[2:], parent=parent)


def test_services_are_nats_postgres_and_two_hubs(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {"nats", "postgres", "hub", "hub2"}


def test_both_hubs_share_one_postgresql_database_and_one_token(compose: dict[str, Any]) -> None:
    services = compose["services"]
    postgres = services["postgres"]
    assert postgres["image"].startswith("postgres:16")
    env = postgres["environment"]
    urls = {services[h]["environment"][DATABASE_ENV] for h in ("hub", "hub2")}
    assert len(urls) == 1
    url = urlparse(urls.pop())
    assert (url.scheme, url.hostname, url.port) == ("postgresql", "postgres", 5432)
    assert (url.username, url.password) == (env["POSTGRES_USER"], env["POSTGRES_PASSWORD"])
    assert url.path.lstrip("/") == env["POSTGRES_DB"]
    # hub2: `mailrun hub` with the first hub's admin token, from its volume.
    hub2 = services["hub2"]
    ctx = parse_mailrun(command_of(hub2))
    assert ctx.info_name == "hub"
    hub_state = str(parse_mailrun(command_of(services["hub"])).params["state_dir"])
    assert str(ctx.params["token_file"]) == f"{hub_state}/admin-token"
    mounts = {v.split(":")[1]: v.split(":")[0] for v in hub2["volumes"]}
    assert mounts[hub_state] == "mailrun-data" and str(ctx.params["state_dir"]) in mounts
    assert str(ctx.params["nats_url"]) == str(
        parse_mailrun(command_of(services["hub"])).params["nats_url"]
    )


def test_nats_runs_2_10_with_jetstream(compose: dict[str, Any]) -> None:
    nats = compose["services"]["nats"]
    assert nats["image"].startswith("nats:2.10")
    assert "-js" in command_of(nats)


def test_the_hub_command_is_a_valid_mailrun_invocation(compose: dict[str, Any]) -> None:
    hub = compose["services"]["hub"]
    assert hub["build"] == "."
    ctx = parse_mailrun(command_of(hub))
    assert ctx.info_name == "up"
    params = ctx.params
    # The NATS URL names the nats service on its default port.
    url = urlparse(params["nats_url"])
    assert (url.scheme, url.hostname, url.port) == ("nats", "nats", 4222)
    assert {"nats", "postgres"} <= set(hub["depends_on"])
    # The hub listens on all interfaces on the port compose publishes.
    host, _, port = params["http"].rpartition(":")
    assert host == "0.0.0.0"
    published = [str(p).rsplit(":", 1)[-1] for p in hub["ports"]]
    assert port in published
    # The state dir is the mounted volume, declared at the top level.
    mounts = {v.split(":")[1]: v.split(":")[0] for v in hub["volumes"]}
    assert str(params["state_dir"]) in mounts
    assert mounts[str(params["state_dir"])] in compose["volumes"]


def test_a_mistyped_option_would_be_caught() -> None:
    with pytest.raises(click.UsageError):
        parse_mailrun(["mailrun", "up", "--nats-url", "nats://nats:4222"])
    with pytest.raises(click.BadParameter):
        parse_mailrun(["mailrun", "up", "--http", "8470"])


def test_the_dockerfile_installs_the_project_as_a_non_root_user(
    compose: dict[str, Any],
) -> None:
    text = (REPO / "Dockerfile").read_text()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "FROM python:3.11-slim"
    assert re.search(r'^RUN pip install "?\.(\[postgres\])?"?(\s|$)', text, re.M), "the project"
    for part in ("pyproject.toml", "runtime", "hub", "sidecar"):
        assert re.search(rf"^COPY .*\b{re.escape(part)}\b", text, re.M), part
    users = [ln.split()[1] for ln in lines if ln.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    state_dir = str(parse_mailrun(command_of(compose["services"]["hub"])).params["state_dir"])
    assert f"VOLUME {state_dir}" in lines
    assert "EXPOSE 8470" in lines


def test_dockerignore_keeps_local_state_out_of_the_image() -> None:
    ignored = (REPO / ".dockerignore").read_text().split()
    for entry in (".git", ".venv", "mailrun-state"):
        assert entry in ignored
