"""RetryPolicy: the delay after each failed attempt, and when to give up."""

import random
from datetime import timedelta

import pytest

from sqldelay import InvalidArgumentError, RetryPolicy

S = timedelta(seconds=1)


def delays(policy, n):
    return [policy.delay(a) for a in range(1, n + 1)]


def test_fixed():
    assert delays(RetryPolicy.fixed(3 * S), 3) == [3 * S] * 3


def test_linear_grows_by_the_increment_up_to_the_cap():
    policy = RetryPolicy.linear(2 * S, 3 * S, max_delay=9 * S)
    assert delays(policy, 5) == [2 * S, 5 * S, 8 * S, 9 * S, 9 * S]


def test_exponential_doubles_up_to_the_cap():
    policy = RetryPolicy.exponential(S, 2, max_delay=timedelta(seconds=20))
    assert delays(policy, 7) == [S, 2 * S, 4 * S, 8 * S, 16 * S, 20 * S, 20 * S]


def test_exponential_with_a_huge_attempt_number_is_the_cap():
    policy = RetryPolicy.exponential(S, 10, max_delay=timedelta(hours=1), max_attempts=None)
    assert policy.delay(100_000) == timedelta(hours=1)


def test_jitter_stays_within_its_band_and_varies():
    policy = RetryPolicy.exponential(10 * S, 2, jitter=0.5, rng=random.Random(7))
    got = [policy.delay(2) for _ in range(200)]
    assert all(10 * S <= d <= 20 * S for d in got)
    assert len(set(got)) > 100


def test_custom_callable_gets_the_attempt_number():
    policy = RetryPolicy.custom(lambda attempt: timedelta(minutes=attempt * 10), max_attempts=3)
    assert delays(policy, 3) == [timedelta(minutes=10), timedelta(minutes=20),
                                 timedelta(minutes=30)]


def test_gives_up_after_max_attempts():
    policy = RetryPolicy.fixed(S, max_attempts=3)
    assert [policy.gives_up_after(a) for a in (1, 2, 3, 4)] == [False, False, True, True]
    forever = RetryPolicy.fixed(S, max_attempts=None)
    assert not forever.gives_up_after(10**9)


@pytest.mark.parametrize("build", [
    lambda: RetryPolicy.fixed(-S),
    lambda: RetryPolicy.fixed(5),
    lambda: RetryPolicy.fixed(S, max_attempts=0),
    lambda: RetryPolicy.linear(S, -S),
    lambda: RetryPolicy.exponential(S, 0.5),
    lambda: RetryPolicy.exponential(S, 2, jitter=1.5),
    lambda: RetryPolicy.exponential(S, 2, max_delay=-S),
    lambda: RetryPolicy.custom("not callable"),
])
def test_bad_arguments_are_rejected(build):
    with pytest.raises(InvalidArgumentError):
        build()


def test_a_custom_schedule_returning_garbage_is_named():
    policy = RetryPolicy.custom(lambda attempt: 5)
    with pytest.raises(InvalidArgumentError, match="retry delay after attempt 1"):
        policy.delay(1)
