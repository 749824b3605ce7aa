"""Backoff: doubling to a cap, jitter in the upper half, finite for any attempt;
Retry: a retry loop's count, delay, wait and reset, for any outage length."""

from __future__ import annotations

import math
import random

import anyio
import pytest

from runtime import Backoff, Retry, Wakeup
from runtime.actors import RestartPolicy
from runtime.config import BACKOFF_MAX_ENV
from runtime.loops import ATTEMPT_LIMIT, backoff, backoff_max_from_env, next_attempt


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


def test_a_retry_counts_failures_draws_each_delay_once_and_resets_on_success() -> None:
    retry = Retry(Backoff(initial=0.05, maximum=1.0, jitter=False))
    assert (retry.failures, retry.delay) == (0, 0.0)
    assert [retry.failed() for _ in range(3)] == [0.05, 0.1, 0.2]
    assert (retry.failures, retry.delay) == (3, 0.2)
    retry.succeeded()
    assert (retry.failures, retry.delay) == (0, 0.0)
    assert retry.failed() == 0.05  # from the start again


def test_a_retry_announces_the_jittered_delay_it_waits() -> None:
    first, again = Retry(Backoff(), rng=random.Random(3)), Retry(Backoff(), rng=random.Random(3))
    drawn = [first.failed() for _ in range(5)]
    assert drawn == [again.failed() for _ in range(5)]
    assert first.delay == drawn[-1]
    assert all(
        Backoff().ceiling(n) / 2 <= d <= Backoff().ceiling(n) for n, d in enumerate(drawn, 1)
    )


def test_a_retry_survives_an_outage_of_any_length() -> None:
    for cap in (0.001, 1.0, 30.0):
        retry = Retry(Backoff(initial=min(0.05, cap), maximum=cap))
        for _ in range(ATTEMPT_LIMIT + 5):
            delay = retry.failed()
        assert retry.failures == ATTEMPT_LIMIT  # saturated, not growing for ever
        assert math.isfinite(delay) and cap / 2 <= delay <= cap
        retry.succeeded()
        assert retry.failures == 0


@pytest.mark.anyio
async def test_a_retry_waits_its_delay_or_until_something_ends_the_wait() -> None:
    retry = Retry(Backoff(initial=30.0, maximum=30.0, jitter=False))
    retry.failed()
    given: list[float] = []

    async def until(delay: float) -> None:
        given.append(delay)

    await retry.wait(until)
    assert given == [30.0]  # the wait is handed the delay the failure drew
    wakeup = Wakeup()
    wakeup.set()  # the peer is back
    with anyio.fail_after(5):  # far less than the 30 s delay
        await retry.wait(wakeup.wait)
    quick = Retry(Backoff(initial=0.001, maximum=0.001))
    quick.failed()
    with anyio.fail_after(5):
        await quick.wait()  # a plain sleep of the delay
