"""Backoff: doubling to a cap, jitter in the upper half, finite for any attempt."""

from __future__ import annotations

import math
import random

import pytest

from runtime import (
    ATTEMPT_LIMIT,
    BACKOFF_MAX_ENV,
    Backoff,
    RestartPolicy,
    backoff,
    backoff_max_from_env,
    next_attempt,
)


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


def test_attempt_ten_thousand_waits_the_cap() -> None:
    for cap in (0.001, 1.0, 30.0):
        exact = Backoff(initial=0.05 if cap > 0.05 else cap, maximum=cap, jitter=False)
        assert exact.ceiling(10_000) == exact.delay(10_000) == cap
        assert cap / 2 <= Backoff(initial=exact.initial, maximum=cap).delay(10_000) <= cap


def test_attempt_counters_saturate() -> None:
    attempt = 0
    for _ in range(ATTEMPT_LIMIT + 5):
        attempt = next_attempt(attempt)
    assert attempt == ATTEMPT_LIMIT
    assert next_attempt(ATTEMPT_LIMIT) == ATTEMPT_LIMIT
    assert Backoff(jitter=False).delay(ATTEMPT_LIMIT) == 1.0


@pytest.mark.parametrize(
    ("initial", "maximum"), [(0.0, 1.0), (-1.0, 1.0), (0.1, 0.0), (0.1, math.inf), (math.nan, 1.0)]
)
def test_a_backoff_that_could_spin_or_never_retry_is_refused(
    initial: float, maximum: float
) -> None:
    with pytest.raises(ValueError, match="positive, finite"):
        Backoff(initial=initial, maximum=maximum)


def test_capping_compresses_every_delay_and_keeps_the_rest() -> None:
    policy = Backoff(initial=0.05, maximum=2.0, jitter=False)
    fast = policy.capped(0.01)
    assert (fast.initial, fast.maximum, fast.jitter) == (0.01, 0.01, False)
    assert policy.capped(None) is policy and policy.capped(5.0) is policy


def test_the_cap_comes_from_the_environment_and_is_announced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert backoff_max_from_env({}) is None
    assert not caplog.records
    assert backoff_max_from_env({BACKOFF_MAX_ENV: " 0.005 "}) == 0.005
    assert [r.getMessage() for r in caplog.records] == [
        f"{BACKOFF_MAX_ENV}=0.005: every retry delay is capped at it (a test setting)"
    ]
    for bad in ("0", "-1", "inf", "nan", "soon"):
        with pytest.raises(ValueError, match=f"{BACKOFF_MAX_ENV} must be a positive number"):
            backoff_max_from_env({BACKOFF_MAX_ENV: bad})
