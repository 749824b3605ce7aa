"""NATS identities: key pairs, the hub's seed file, the rendered config."""

from __future__ import annotations

import stat
import subprocess
import threading
from pathlib import Path

import pytest

from hub._errors import NatsIdentityError
from hub.natsauth import (
    HUB_SEED_FILE,
    DeploymentUser,
    hub_seed,
    new_user_key,
    public_key,
    render_authorization,
    users_of,
)
from hub.up import find_nats_server
from runtime import Subjects, new_id


def test_a_user_key_is_an_nkey_user_pair() -> None:
    key = new_user_key()
    assert key.seed.startswith("SU") and key.public.startswith("U")
    assert public_key(key.seed) == key.public
    assert new_user_key().public != key.public
    with pytest.raises(NatsIdentityError):
        public_key("SUnot-a-seed")


def test_the_hub_seed_is_made_once_private_and_the_same_for_every_caller(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    seeds: list[str] = []

    def take() -> None:
        seeds.append(hub_seed(state))

    racers = [threading.Thread(target=take) for _ in range(8)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    assert len(set(seeds)) == 1
    path = state / HUB_SEED_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert hub_seed(state) == seeds[0]
    assert [p.name for p in state.iterdir()] == [HUB_SEED_FILE]  # no temp file left
    path.write_text("damaged\n")
    with pytest.raises(NatsIdentityError):
        hub_seed(state)


def test_the_config_names_only_well_formed_identities_and_the_server_reads_it(
    tmp_path: Path,
) -> None:
    dep, key = new_id("dep"), new_user_key()
    listing = [
        {"id": dep, "nats_user": key.public},
        {"id": new_id("dep"), "nats_user": None},  # from before identities: no user
        {"id": "dep_x\n}\nauthorization {", "nats_user": key.public},  # never in the file
        {"id": new_id("dep"), "nats_user": 'U" permissions: {}'},
    ]
    users = users_of(listing)
    assert users == {DeploymentUser(dep, key.public)}
    hub = new_user_key().public
    text = render_authorization(hub, users, Subjects("acme"))
    assert text.count("nkey:") == 2 and "acme.hub.events." + dep in text
    config = tmp_path / "nats.conf"
    config.write_text(text)
    check = subprocess.run(
        [str(find_nats_server()), "-c", str(config), "-t"], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr + check.stdout
    with pytest.raises(ValueError):
        render_authorization("not a key", users, Subjects())
