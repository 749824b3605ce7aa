"""``mailrun up``'s listing of the hub's deployments (hub/up/listing.py): a
poll's answer of what changed updates what the polls before told, a whole
one replaces it, and a view read before a sidecar of ours fell asleep does
not show that deployment awake."""

from __future__ import annotations

from typing import Any

from hub.natsauth import DeploymentUser, new_user_key
from hub.up.listing import REVOKE_AFTER, Listing
from runtime import new_id


def view(dep: str, status: str = "deployed", user: str | None = None) -> dict[str, Any]:
    return {"id": dep, "status": status, "nats_user": user}


def test_what_changed_updates_what_was_listed_and_a_whole_listing_replaces_it() -> None:
    a, b, c = new_id("dep"), new_id("dep"), new_id("dep")
    listing = Listing()
    assert listing.cursor == 0  # the first poll asks for the whole listing
    listing.apply({"deployments": [view(a), view(b)], "cursor": 7, "whole": True}, 1.0)
    assert (listing.cursor, listing.statuses({})) == (7, {a: "deployed", b: "deployed"})
    listing.apply({"deployments": [], "cursor": 7, "whole": False}, 2.0)
    assert listing.statuses({}) == {a: "deployed", b: "deployed"}
    changed = [view(b, "deleted"), view(c), view("../etc")]  # only ids count
    listing.apply({"deployments": changed, "cursor": 9, "whole": False}, 3.0)
    assert listing.cursor == 9
    assert listing.statuses({}) == {a: "deployed", b: "deleted", c: "deployed"}
    # Whole again (the hub could not follow the cursor): what it lists, only.
    listing.apply({"deployments": [view(c, "paused")], "cursor": 12, "whole": True}, 4.0)
    assert listing.statuses({}) == {c: "paused"}


def test_a_hub_that_gives_no_cursor_is_listed_whole_every_time() -> None:
    a, b = new_id("dep"), new_id("dep")
    listing = Listing()
    listing.apply({"deployments": [view(a), view(b)]}, 1.0)
    listing.apply({"deployments": [view(b)]}, 2.0)
    assert (listing.cursor, listing.statuses({})) == (0, {b: "deployed"})
    # Nor is a cursor that is not a whole number one.
    for cursor in (True, -3, "7", 1.5):
        listing.apply({"deployments": [view(a)], "cursor": cursor, "whole": False}, 3.0)
        assert (listing.cursor, listing.statuses({})) == (0, {a: "deployed"})


def test_a_view_read_before_our_sidecar_fell_asleep_does_not_show_it_awake() -> None:
    a, b = new_id("dep"), new_id("dep")
    listing = Listing()
    listing.apply({"deployments": [view(a), view(b)], "cursor": 3, "whole": True}, 10.0)
    # a's sidecar fell asleep after that poll, b's before it.
    asleep = {a: 11.0, b: 9.0}
    assert listing.statuses(asleep) == {a: "asleep", b: "deployed"}
    # A poll after it fell asleep brings a's view: shown as it says.
    listing.apply({"deployments": [view(a)], "cursor": 4, "whole": False}, 12.0)
    assert listing.statuses(asleep) == {a: "deployed", b: "deployed"}


def test_the_nats_users_are_the_live_deployments_and_follow_the_changes() -> None:
    a, b = new_id("dep"), new_id("dep")
    ka, kb = new_user_key().public, new_user_key().public
    listing = Listing()
    listing.apply({"deployments": [view(a, user=ka)], "cursor": 1, "whole": True}, 1.0)
    assert listing.users(1.0) == {DeploymentUser(a, ka)}
    listing.apply({"deployments": [view(b, "asleep", kb)], "cursor": 2, "whole": False}, 2.0)
    assert listing.users(2.0) == {DeploymentUser(a, ka), DeploymentUser(b, kb)}
    listing.apply({"deployments": [view(a, "deleted", ka)], "cursor": 3, "whole": False}, 3.0)
    # Deleted: admitted REVOKE_AFTER more, so that its sidecar hears the hub
    # say so before NATS closes its connection; then revoked.
    both = {DeploymentUser(a, ka), DeploymentUser(b, kb)}
    assert listing.users(3.0) == listing.users(3.0 + REVOKE_AFTER - 0.1) == both
    assert listing.users(3.0 + REVOKE_AFTER) == {DeploymentUser(b, kb)}
    assert listing.users(3.0) == {DeploymentUser(b, kb)}  # for good


def test_a_deployment_deleted_before_up_started_is_never_admitted() -> None:
    a, b = new_id("dep"), new_id("dep")
    ka, kb = new_user_key().public, new_user_key().public
    listing = Listing()
    listing.apply({"deployments": [view(a, "deleted", ka), view(b, user=kb)], "cursor": 1}, 1.0)
    assert listing.users(1.0) == {DeploymentUser(b, kb)}


def test_a_wake_or_a_sleep_keeps_the_users_and_a_new_key_or_a_pause_follows() -> None:
    a, b = new_id("dep"), new_id("dep")
    ka, kb, kb2 = (new_user_key().public for _ in range(3))
    listing = Listing()
    listing.apply({"deployments": [view(a, user=ka), view(b, user=kb)], "cursor": 1}, 1.0)
    admitted = listing.users(1.0)
    # Statuses moving between live ones change no user: the very same set,
    # which the NATS config compares by identity before any element.
    for n, status in enumerate(["asleep", "deployed", "asleep"], start=2):
        listing.apply({"deployments": [view(a, status, ka)], "cursor": n, "whole": False}, n)
        assert listing.users(float(n)) is admitted
    listing.apply({"deployments": [view(b, user=kb2)], "cursor": 5, "whole": False}, 5.0)
    assert listing.users(5.0) == {DeploymentUser(a, ka), DeploymentUser(b, kb2)}
    listing.apply({"deployments": [view(b, "paused", kb2)], "cursor": 6, "whole": False}, 6.0)
    assert listing.users(6.0) == {DeploymentUser(a, ka), DeploymentUser(b, kb2)}
    listing.apply({"deployments": [view(a, user="not a key")], "cursor": 7, "whole": False}, 7.0)
    assert listing.users(7.0) == {DeploymentUser(b, kb2)}
    # A whole listing starts over: what it lists, only.
    listing.apply({"deployments": [view(a, user=ka)], "cursor": 8, "whole": True}, 8.0)
    assert listing.users(8.0) == {DeploymentUser(a, ka)}


def test_a_poll_of_changes_shows_what_it_named_and_nothing_else() -> None:
    """``up``'s pass over a poll is over what changed: among 2,000
    deployments, a poll naming one shows that one, not all again."""
    deps = [new_id("dep") for _ in range(2000)]
    listing = Listing()
    listing.apply({"deployments": [view(d, "asleep") for d in deps], "cursor": 3}, 1.0)
    assert listing.whole and listing.changed == set(deps)
    assert len(listing.statuses({})) == 2000
    listing.apply({"deployments": [view(deps[7])], "cursor": 4, "whole": False}, 2.0)
    assert not listing.whole and listing.changed == {deps[7]}
    assert listing.statuses({}, listing.changed) == {deps[7]: "deployed"}
    # Asked for with one it does not know (a poll's leftover): the known alone.
    assert listing.statuses({}, {deps[9], new_id("dep")}) == {deps[9]: "asleep"}
    listing.apply({"deployments": [], "cursor": 4, "whole": False}, 3.0)
    assert listing.changed == set() and listing.statuses({}, listing.changed) == {}
