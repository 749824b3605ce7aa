"""Backoff: doubling to a cap, jitter in the upper half, finite for any attempt."""

from __future__ import annotations

import math
import random

from runtime import Backoff, RestartPolicy, backoff


def test_delays_double_from_initial_to_the_maximum() -> None:
    exact = Backoff(initial=0.05, maximum=1.0, jitter=False)
    assert [exact.delay(n) for n in range(1, 8)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert exact.delay(0) == exact.delay(-3) == 0.05


def test_jitter_stays_in_the_upper_half_and_varies() -> None:
    policy = Backoff(initial=0.05, maximum=1.0)
    for attempt in (1, 3, 9):
        ceiling = policy.ceiling(attempt)
        delays = [policy.delay(attempt) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1


def test_any_attempt_gives_a_finite_delay_within_the_maximum() -> None:
    for policy in (Backoff(), Backoff(initial=30.0, maximum=30.0), Backoff(jitter=False)):
        for attempt in (1024, 1025, 10**6):
            delay = policy.delay(attempt)
            assert math.isfinite(delay)
            assert 0 < delay <= policy.maximum
    assert backoff(10**6) <= 1.0


def test_a_seeded_rng_makes_the_jitter_reproducible() -> None:
    policy = Backoff(initial=0.02, maximum=0.5)
    first = [policy.delay(n, rng=random.Random(7)) for n in range(1, 6)]
    again = [policy.delay(n, rng=random.Random(7)) for n in range(1, 6)]
    assert first == again


def test_a_restart_policy_backs_off_with_its_own_settings() -> None:
    policy = RestartPolicy(backoff=Backoff(0.01, 0.05))
    assert policy.backoff == Backoff(initial=0.01, maximum=0.05)
