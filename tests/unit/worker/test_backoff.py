"""retry_delay: how long a failed job waits before its next try."""

from __future__ import annotations

import random

import pytest

from glidemq.worker.backoff import MAX_DELAY_MS, retry_delay

ERR = ValueError("boom")


def test_no_backoff_retries_at_once() -> None:
    assert retry_delay(None, 1, ERR, {}) == 0
    assert retry_delay(None, 5, ERR, {}) == 0


@pytest.mark.parametrize("attempts_made", [1, 2, 3, 10])
def test_fixed_backoff_is_the_same_every_attempt(attempts_made: int) -> None:
    assert retry_delay({"type": "fixed", "delay": 250}, attempts_made, ERR, {}) == 250


def test_fixed_is_the_default_type() -> None:
    assert retry_delay({"delay": 70}, 3, ERR, {}) == 70


def test_exponential_backoff_doubles_each_attempt() -> None:
    backoff = {"type": "exponential", "delay": 100}
    delays = [retry_delay(backoff, n, ERR, {}) for n in range(1, 6)]
    assert delays == [100, 200, 400, 800, 1600]


def test_exponential_backoff_treats_attempt_zero_like_the_first() -> None:
    assert retry_delay({"type": "exponential", "delay": 100}, 0, ERR, {}) == 100


def test_number_shorthand_is_a_fixed_delay() -> None:
    assert retry_delay(300, 1, ERR, {}) == 300
    assert retry_delay(300, 4, ERR, {}) == 300
    assert retry_delay(12.9, 1, ERR, {}) == 12


def test_negative_number_shorthand_means_retry_at_once() -> None:
    assert retry_delay(-5, 1, ERR, {}) == 0


def test_bool_is_not_a_number_shorthand() -> None:
    assert retry_delay(True, 1, ERR, {}) == 0


def test_custom_strategy_is_called_with_attempts_and_error() -> None:
    calls: list[tuple[int, BaseException]] = []

    def mine(attempts_made: int, error: BaseException) -> int:
        calls.append((attempts_made, error))
        return attempts_made * 7

    assert retry_delay({"type": "mine", "delay": 1}, 3, ERR, {"mine": mine}) == 21
    assert calls == [(3, ERR)]
    assert calls[0][1] is ERR


def test_custom_strategy_returning_negative_means_no_retry() -> None:
    assert retry_delay({"type": "never"}, 1, ERR, {"never": lambda n, e: -10}) == -1
    assert retry_delay({"type": "never"}, 1, ERR, {"never": lambda n, e: -1}) == -1


def test_custom_strategy_returning_zero_retries_at_once() -> None:
    assert retry_delay({"type": "now"}, 2, ERR, {"now": lambda n, e: 0}) == 0


def test_unknown_strategy_name_raises_key_error() -> None:
    with pytest.raises(KeyError):
        retry_delay({"type": "nope", "delay": 10}, 1, ERR, {"mine": lambda n, e: 1})


@pytest.mark.parametrize("jitter", [0.1, 0.5, 1.0])
def test_jitter_stays_within_bounds(jitter: float) -> None:
    random.seed(1234)
    delay = 1000
    backoff = {"type": "fixed", "delay": delay, "jitter": jitter}
    seen = {retry_delay(backoff, 1, ERR, {}) for _ in range(500)}
    assert min(seen) >= delay * (1 - jitter) - 1  # int() truncation may take off one ms
    assert max(seen) <= delay
    assert len(seen) > 10  # jitter actually varies the delay


def test_jitter_applies_to_exponential_delay() -> None:
    random.seed(99)
    backoff = {"type": "exponential", "delay": 100, "jitter": 0.5}
    seen = [retry_delay(backoff, 3, ERR, {}) for _ in range(300)]
    assert all(200 <= d <= 400 for d in seen)
    assert min(seen) < 400


def test_jitter_above_one_is_clamped() -> None:
    random.seed(7)
    backoff = {"type": "fixed", "delay": 100, "jitter": 5}
    seen = [retry_delay(backoff, 1, ERR, {}) for _ in range(300)]
    assert all(0 <= d <= 100 for d in seen)


def test_delay_is_capped() -> None:
    assert retry_delay({"type": "exponential", "delay": 1000}, 60, ERR, {}) == MAX_DELAY_MS
    assert retry_delay({"type": "fixed", "delay": 2**40}, 1, ERR, {}) == MAX_DELAY_MS
    assert retry_delay({"type": "big"}, 1, ERR, {"big": lambda n, e: 2**50}) == MAX_DELAY_MS
    assert MAX_DELAY_MS == 2**31 - 1
