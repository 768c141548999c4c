"""The retry rule: which valkey-glide failures mean "did not run", "may have run", "library
missing", "client closed" or "do not retry", which library functions may run twice, and the
policy's bounds. Behaviour against a real server is in tests/integration/worker/test_retry.py."""

from __future__ import annotations

import pytest
from glide import ClosingError, RequestError
from glide import ConnectionError as GlideConnectionError
from glide import TimeoutError as GlideTimeoutError

import glidemq
from glidemq.client.functions import raw_library_source
from glidemq.client.retry import DEFAULT_RETRY, Failure, RetryPolicy, classify, to_glidemq_error
from glidemq.wire import RETRY_SAFE_FUNCTIONS


@pytest.mark.parametrize(
    "reply",
    [
        "CLUSTERDOWN The cluster is down",
        "TRYAGAIN Multiple keys request during rehashing of slot",
        "MOVED 3999 127.0.0.1:6381",
        "ASK 3999 127.0.0.1:6381",
        "LOADING Valkey is loading the dataset in memory",
        "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "READONLY You can't write against a read only replica.",
        "BUSY Valkey is busy running a script.",
        "UNBLOCKED force unblock from blocking operation, instance state changed",
    ],
)
def test_replies_of_commands_that_did_not_run(reply: str) -> None:
    assert classify(RequestError(reply)) is Failure.NOT_RUN


def test_a_request_without_a_connection_for_its_slot_did_not_run() -> None:
    exc = GlideConnectionError(
        "Received connection error `Requested connection not found - "
        "ConnectionNotFoundForRoute: 127.0.0.1:7000`. Will attempt to reconnect"
    )
    assert classify(exc) is Failure.NOT_RUN


def test_time_outs_and_lost_connections_are_ambiguous() -> None:
    assert classify(GlideTimeoutError("timed out")) is Failure.AMBIGUOUS
    lost = GlideConnectionError("FatalReceiveError: channel closed. Will attempt to reconnect")
    assert classify(lost) is Failure.AMBIGUOUS


def test_missing_function_closed_client_and_real_errors() -> None:
    assert classify(RequestError("ERR Function not found")) is Failure.MISSING_LIBRARY
    assert classify(ClosingError("closed")) is Failure.CLOSED
    for reply in (
        "BUSYGROUP Consumer Group name already exists",
        "NOGROUP no group",
        "WRONGTYPE Operation against a key",
        "ERR user_script:1: boom",
    ):
        assert classify(RequestError(reply)) is Failure.FATAL, reply


def test_unretried_failures_map_into_the_glidemq_tree() -> None:
    assert isinstance(to_glidemq_error(GlideTimeoutError("t"), "x"), glidemq.ConnectionError)
    fatal = to_glidemq_error(RequestError("NOGROUP no group"), "read")
    assert isinstance(fatal, glidemq.ServerError) and "NOGROUP" in str(fatal)


def test_only_repeatable_functions_are_marked_safe() -> None:
    source = raw_library_source()
    for name in RETRY_SAFE_FUNCTIONS:
        assert f"'{name}'" in source, f"{name} is not a library function"
    # a second run of these would add a job twice, append a log line twice, or drop
    # entries a blocking read delivered
    for unsafe in (
        "glidemq_addJob",
        "glidemq_addBulk",
        "glidemq_log",
        "glidemq_moveToActive",
        "glidemq_removeJob",
        "glidemq_revoke",
    ):
        assert unsafe not in RETRY_SAFE_FUNCTIONS


def test_policy_backoff_grows_is_capped_and_jittered() -> None:
    policy = RetryPolicy(first_delay=0.1, max_delay=0.5)
    for attempt, full in ((1, 0.1), (2, 0.2), (3, 0.4), (4, 0.5), (10, 0.5)):
        for _ in range(20):
            assert full / 2 <= policy.delay(attempt) <= full
    assert DEFAULT_RETRY.budget > 0 and DEFAULT_RETRY.attempts > 1


@pytest.mark.parametrize(
    "kwargs",
    [{"attempts": 0}, {"attempts": 1.5}, {"budget": -1}, {"first_delay": "1"}, {"max_delay": True}],
)
def test_bad_policy_is_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(glidemq.ValidationError, match="retry"):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_connection_options_carry_a_policy() -> None:
    policy = RetryPolicy(attempts=3)
    opts = glidemq.ConnectionOptions.from_url("valkey://h:1", retry=policy)
    assert opts.retry is policy
    assert glidemq.ConnectionOptions().retry is DEFAULT_RETRY
    with pytest.raises(glidemq.ValidationError, match="retry"):
        glidemq.ConnectionOptions(retry=3)  # type: ignore[arg-type]
