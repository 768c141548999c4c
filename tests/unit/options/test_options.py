"""Typed options validate themselves: JobOptions, WorkerOptions, their parts, and
ConnectionOptions (including URL parsing)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from glidemq import (
    Backoff,
    ConnectionOptions,
    Deduplication,
    GlideMQError,
    JobOptions,
    KeepJobs,
    ValidationError,
    WorkerOptions,
)
from glidemq.client.connection import DEFAULT_REQUEST_TIMEOUT_MS, resolve_connection
from glidemq.types import (
    MAX_PRIORITY,
    field_defaults,
    from_mapping,
    retention_args,
    retention_from_wire,
)


def _field_of(fn: Any, *args: Any, **kwargs: Any) -> str:
    """Call `fn`, expect a ValidationError (a GlideMQError), return the field it names."""
    with pytest.raises(ValidationError) as info:
        fn(*args, **kwargs)
    assert isinstance(info.value, GlideMQError)
    return info.value.field


# =========================================================================== JobOptions


def test_job_options_defaults() -> None:
    o = JobOptions()
    assert (o.delay, o.priority, o.attempts, o.ttl) == (0, 0, 1, 0)
    assert o.backoff is None and o.timeout is None and o.job_id is None
    assert o.to_wire() == {}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"delay": -1}, "delay"),
        ({"delay": 1.5}, "delay"),
        ({"delay": True}, "delay"),
        ({"delay": "10"}, "delay"),
        ({"priority": -1}, "priority"),
        ({"priority": MAX_PRIORITY + 1}, "priority"),
        ({"attempts": 0}, "attempts"),
        ({"attempts": -3}, "attempts"),
        ({"ttl": -1}, "ttl"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": -5}, "timeout"),
        ({"backoff": "exponential"}, "backoff"),
        ({"backoff": 1000}, "backoff"),
        ({"deduplication": "id-1"}, "deduplication"),
        ({"remove_on_complete": -1}, "remove_on_complete"),
        ({"remove_on_complete": "yes"}, "remove_on_complete"),
        ({"remove_on_fail": 1.5}, "remove_on_fail"),
        ({"job_id": ""}, "job_id"),
        ({"job_id": "x" * 257}, "job_id"),
        ({"job_id": "a{b}"}, "job_id"),
        ({"job_id": "a:b"}, "job_id"),
        ({"job_id": "bell\x07"}, "job_id"),
    ],
)
def test_job_options_reject_bad_values_naming_the_field(kwargs: dict[str, Any], field: str) -> None:
    assert _field_of(JobOptions, **kwargs) == field
    # the same value given as a dict goes through the same checks
    assert _field_of(JobOptions.coerce, kwargs) == field


def test_priority_bounds_are_inclusive() -> None:
    assert MAX_PRIORITY == 2047
    assert JobOptions(priority=MAX_PRIORITY).priority == MAX_PRIORITY
    assert JobOptions(priority=0).priority == 0


def test_job_id_of_256_characters_is_accepted() -> None:
    assert JobOptions(job_id="x" * 256).job_id == "x" * 256


def test_unknown_job_option_key_is_rejected_with_a_hint() -> None:
    with pytest.raises(ValidationError) as info:
        JobOptions.coerce({"dealy": 100})
    assert info.value.field == "dealy"
    assert "did you mean 'delay'" in str(info.value)
    with pytest.raises(ValidationError) as info2:
        JobOptions.coerce({"remove_on_compete": True})
    assert "did you mean 'remove_on_complete'" in str(info2.value)


def test_unknown_key_without_a_close_match_has_no_hint() -> None:
    with pytest.raises(ValidationError) as info:
        JobOptions.coerce({"zzzzqqq": 1})
    assert info.value.field == "zzzzqqq"
    assert "did you mean" not in str(info.value)


@pytest.mark.parametrize(
    ("opts", "field", "hint"),
    [
        ({"backoff": {"typ": "fixed"}}, "backoff.typ", "type"),
        ({"remove_on_complete": {"cnt": 3}}, "remove_on_complete.cnt", "count"),
        ({"deduplication": {"id": "d", "mod": "simple"}}, "deduplication.mod", "mode"),
    ],
)
def test_unknown_nested_keys_name_the_full_path(
    opts: dict[str, Any], field: str, hint: str
) -> None:
    with pytest.raises(ValidationError) as info:
        JobOptions.coerce(opts)
    assert info.value.field == field
    assert f"did you mean {hint!r}" in str(info.value)


@pytest.mark.parametrize(
    ("opts", "field"),
    [
        ({"backoff": {"type": ""}}, "backoff.type"),
        ({"backoff": {"type": 3}}, "backoff.type"),
        ({"backoff": {"type": "fixed", "delay": -1}}, "backoff.delay"),
        ({"backoff": {"type": "fixed", "jitter": 1.5}}, "backoff.jitter"),
        ({"backoff": {"type": "fixed", "jitter": -0.1}}, "backoff.jitter"),
        ({"backoff": {"type": "fixed", "jitter": "lots"}}, "backoff.jitter"),
        ({"deduplication": {"id": ""}}, "deduplication.id"),
        ({"deduplication": {"id": "d", "mode": "sometimes"}}, "deduplication.mode"),
        ({"deduplication": {"id": "d", "mode": "throttle"}}, "deduplication.ttl"),
        ({"deduplication": {"id": "d", "ttl": -1}}, "deduplication.ttl"),
        ({"remove_on_fail": {"count": -1}}, "remove_on_fail.count"),
        ({"remove_on_fail": {"age": 0}}, "remove_on_fail.age"),
    ],
)
def test_nested_option_values_are_checked(opts: dict[str, Any], field: str) -> None:
    assert _field_of(JobOptions.coerce, opts) == field


def test_coerce_accepts_options_dict_or_none() -> None:
    o = JobOptions(delay=5)
    assert JobOptions.coerce(o) is o
    assert JobOptions.coerce(None) == JobOptions()
    built = JobOptions.coerce(
        {
            "delay": 10,
            "attempts": 3,
            "backoff": {"type": "exponential", "delay": 200, "jitter": 0.5},
            "remove_on_complete": {"count": 10, "age": 60},
            "deduplication": {"id": "d1", "mode": "throttle", "ttl": 1000},
        }
    )
    assert built.backoff == Backoff("exponential", 200, 0.5)
    assert built.remove_on_complete == KeepJobs(count=10, age=60)
    assert built.deduplication == Deduplication("d1", ttl=1000, mode="throttle")


@pytest.mark.parametrize("bad", [5, "delay=5", [("delay", 5)]])
def test_coerce_rejects_non_mapping(bad: object) -> None:
    assert _field_of(JobOptions.coerce, bad) == "opts"


def test_to_wire_uses_protocol_camel_case_names() -> None:
    o = JobOptions(
        delay=100,
        priority=3,
        attempts=4,
        backoff=Backoff("exponential", 50, 0.25),
        timeout=2000,
        remove_on_complete=True,
        remove_on_fail=KeepJobs(count=5),
        deduplication=Deduplication("dd"),
        job_id="order-1",
        ttl=9000,
    )
    assert o.to_wire() == {
        "delay": 100,
        "priority": 3,
        "attempts": 4,
        "backoff": {"type": "exponential", "delay": 50, "jitter": 0.25},
        "timeout": 2000,
        "removeOnComplete": True,
        "removeOnFail": {"count": 5},
        "deduplication": {"id": "dd", "ttl": 0, "mode": "simple"},
        "jobId": "order-1",
        "ttl": 9000,
    }


def test_job_options_are_immutable() -> None:
    o = JobOptions()
    with pytest.raises(AttributeError):
        o.delay = 5  # type: ignore[misc]


# =========================================================================== retention


def test_retention_args_encoding() -> None:
    assert retention_args(True) == (0, 0)
    assert retention_args(False) == (-1, 0)
    assert retention_args(7) == (7, 0)
    assert retention_args(KeepJobs(count=3, age=60)) == (3, 60)
    assert retention_args(KeepJobs(age=60)) == (-1, 60)


def test_retention_from_wire_reads_any_producer() -> None:
    assert retention_from_wire(None) is None
    assert retention_from_wire(True) is True
    assert retention_from_wire(False) is False
    assert retention_from_wire(10) == 10
    assert retention_from_wire({"count": 2, "age": 30}) == KeepJobs(count=2, age=30)
    # garbage from a foreign producer degrades to "no limit", never an exception
    assert retention_from_wire({"count": -1, "age": "x"}) == KeepJobs()
    assert retention_from_wire(-4) is None
    assert retention_from_wire("soon") is None


# =========================================================================== WorkerOptions


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": -1}, "concurrency"),
        ({"concurrency": 100_001}, "concurrency"),
        ({"concurrency": 2.0}, "concurrency"),
        ({"prefetch": 0}, "prefetch"),
        ({"block_timeout": 0}, "block_timeout"),
        ({"lock_duration": 99}, "lock_duration"),
        ({"stalled_interval": 10}, "stalled_interval"),
        ({"max_stalled_count": -1}, "max_stalled_count"),
        ({"promotion_interval": 1}, "promotion_interval"),
        ({"remove_on_complete": -2}, "remove_on_complete"),
        ({"remove_on_fail": "all"}, "remove_on_fail"),
        ({"close_timeout": -1}, "close_timeout"),
        ({"close_timeout": "soon"}, "close_timeout"),
        ({"backoff_strategies": {"mine": 42}}, "backoff_strategies.mine"),
    ],
)
def test_worker_options_reject_bad_values(kwargs: dict[str, Any], field: str) -> None:
    assert _field_of(WorkerOptions, **kwargs) == field


def test_worker_options_unknown_key_has_hint() -> None:
    with pytest.raises(ValidationError) as info:
        from_mapping(WorkerOptions, {"concurency": 4})
    assert info.value.field == "concurency"
    assert "did you mean 'concurrency'" in str(info.value)


def test_worker_option_defaults_are_listed() -> None:
    defaults = field_defaults(WorkerOptions)
    assert defaults["concurrency"] == 1
    assert defaults["block_timeout"] == 5000
    assert defaults["backoff_strategies"] == {}
    assert set(defaults) == set(WorkerOptions.__dataclass_fields__)


# ================================================================ KeepJobs / Deduplication


def test_keep_jobs_and_deduplication_validate_directly() -> None:
    assert _field_of(KeepJobs, count=-1) == "count"
    assert _field_of(KeepJobs, age=0) == "age"
    assert _field_of(Deduplication, "") == "deduplication.id"
    assert _field_of(Deduplication, "d", mode="never") == "deduplication.mode"  # type: ignore[arg-type]
    assert Deduplication("d", ttl=5, mode="throttle").ttl == 5


# =========================================================================== ConnectionOptions


def test_url_host_and_port() -> None:
    o = ConnectionOptions.from_url("valkey://example.com:7000")
    assert o.addresses == (("example.com", 7000),)
    assert not o.cluster and not o.tls
    assert o.username is None and o.password is None and o.database == 0
    assert o.request_timeout_ms == DEFAULT_REQUEST_TIMEOUT_MS


def test_url_without_port_defaults_to_6379() -> None:
    assert ConnectionOptions.from_url("valkey://cache").addresses == (("cache", 6379),)


def test_url_ipv6_addresses() -> None:
    assert ConnectionOptions.from_url("valkey://[::1]:7001").addresses == (("::1", 7001),)
    assert ConnectionOptions.from_url("valkey://[::1]").addresses == (("::1", 6379),)


def test_url_database() -> None:
    assert ConnectionOptions.from_url("valkey://h:6379/3").database == 3
    assert ConnectionOptions.from_url("valkey://h:6379/").database == 0


def test_url_credentials() -> None:
    o = ConnectionOptions.from_url("valkey://alice:s3cret@h:6379")
    assert (o.username, o.password) == ("alice", "s3cret")
    only_password = ConnectionOptions.from_url("valkey://:pw@h:6379")
    assert (only_password.username, only_password.password) == (None, "pw")
    encoded = ConnectionOptions.from_url("valkey://bob:p%40ss%3Aword@h")
    assert encoded.password == "p@ss:word"


def test_password_is_not_shown() -> None:
    o = ConnectionOptions.from_url("valkey://alice:s3cret@h:6379")
    assert "s3cret" not in repr(o)
    assert "s3cret" not in o.url


@pytest.mark.parametrize(
    ("url", "tls"),
    [("valkey://h", False), ("redis://h", False), ("valkeys://h", True), ("rediss://h", True)],
)
def test_url_schemes_and_tls(url: str, tls: bool) -> None:
    assert ConnectionOptions.from_url(url).tls is tls


def test_several_hosts_mean_a_cluster() -> None:
    o = ConnectionOptions.from_url("valkey://a:7000,b:7001,c:7002")
    assert o.cluster
    assert o.addresses == (("a", 7000), ("b", 7001), ("c", 7002))


@pytest.mark.parametrize("flag", ["1", "true", "yes"])
def test_cluster_query_flag(flag: str) -> None:
    assert ConnectionOptions.from_url(f"valkey://a:7000?cluster={flag}").cluster
    assert not ConnectionOptions.from_url("valkey://a:7000?cluster=0").cluster


def test_timeout_query_parameter() -> None:
    assert ConnectionOptions.from_url("valkey://h?timeout_ms=250").request_timeout_ms == 250


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("http://h:6379", "url"),
        ("h:6379", "url"),
        ("valkey://h:port", "url"),
        ("valkey://h:0", "addresses"),
        ("valkey://h:65536", "addresses"),
        ("valkey://", "url"),
        ("valkey://h/notanumber", "url"),
        ("valkey://h?timeout_ms=soon", "url"),
        ("valkey://h?timeout_ms=0", "request_timeout_ms"),
        ("valkey://a:1,b:2/2", "database"),
    ],
)
def test_bad_urls_raise_validation_error_naming_the_field(url: str, field: str) -> None:
    assert _field_of(ConnectionOptions.from_url, url) == field


def test_overrides_win_over_the_url() -> None:
    o = ConnectionOptions.from_url("valkey://h:1", cluster=True, request_timeout_ms=500)
    assert o.cluster and o.request_timeout_ms == 500


def test_unknown_override_is_rejected() -> None:
    assert _field_of(ConnectionOptions.from_url, "valkey://h", timeout=5) == "timeout"


@pytest.mark.parametrize(
    "options",
    [
        ConnectionOptions(),
        ConnectionOptions(addresses=(("h", 7000),), database=2),
        ConnectionOptions(addresses=(("h", 7000),), tls=True),
        ConnectionOptions(addresses=(("h", 7000),), cluster=True),
        ConnectionOptions(addresses=(("a", 1), ("b", 2)), cluster=True),
        ConnectionOptions(addresses=(("::1", 7000),)),
        ConnectionOptions(username="svc user", request_timeout_ms=1234),
    ],
)
def test_url_round_trips(options: ConnectionOptions) -> None:
    assert ConnectionOptions.from_url(options.url) == options


def test_url_round_trip_drops_only_the_password() -> None:
    o = ConnectionOptions.from_url("valkeys://alice:pw@h:7000/1")
    back = ConnectionOptions.from_url(o.url)
    assert back.password is None
    assert back == ConnectionOptions.from_url("valkeys://alice@h:7000/1")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"addresses": ()}, "addresses"),
        ({"addresses": (("", 1),)}, "addresses"),
        ({"addresses": (("h", 70000),)}, "addresses"),
        ({"request_timeout_ms": 0}, "request_timeout_ms"),
        ({"cluster": True, "database": 1}, "database"),
    ],
)
def test_connection_options_validate_directly(kwargs: dict[str, Any], field: str) -> None:
    assert _field_of(ConnectionOptions, **kwargs) == field


def test_resolve_connection_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    opts = ConnectionOptions(addresses=(("x", 1),))
    assert resolve_connection(opts) is opts
    assert resolve_connection("valkey://y:2").addresses == (("y", 2),)
    monkeypatch.setenv("GLIDEMQ_URL", "valkey://from-env:6390/4")
    from_env = resolve_connection(None)
    assert from_env.addresses == (("from-env", 6390),) and from_env.database == 4
    monkeypatch.delenv("GLIDEMQ_URL")
    assert resolve_connection(None).addresses == (("127.0.0.1", 6379),)
    assert _field_of(resolve_connection, 6379) == "connection"


def test_coerce_keeps_true_and_one_apart_even_when_cached() -> None:
    # True (keep no job) and 1 (keep one job) compare equal in Python; the cache of coerced
    # option dicts must not hand one back for the other, whichever comes first.
    from glidemq.types import JobOptions

    assert JobOptions.coerce({"remove_on_complete": 1}).remove_on_complete == 1
    got = JobOptions.coerce({"remove_on_complete": True}).remove_on_complete
    assert got is True
    assert JobOptions.coerce({"remove_on_fail": False}).remove_on_fail is False
    assert JobOptions.coerce({"remove_on_fail": 0}).remove_on_fail == 0


@pytest.mark.parametrize(("first", "second"), [(1, True), (True, 1), (0, False), (False, 0)])
def test_retention_values_equal_in_python_are_not_confused_by_the_caches(
    first: Any, second: Any
) -> None:
    # True == 1 and False == 0, but remove_on_fail=True drops a failed job at once and =1
    # keeps the newest; False keeps all and 0 none. The cached encodings must not mix them.
    from glidemq.queue.request import default_result_ttl
    from glidemq.types import wire_opts

    for field, key in (
        ("remove_on_fail", "removeOnFail"),
        ("remove_on_complete", "removeOnComplete"),
    ):
        for value in (first, second):
            opts = JobOptions(**{field: value})
            assert orjson.loads(wire_opts(opts)) == {key: value}
            assert type(orjson.loads(wire_opts(opts))[key]) is type(value)
            kept = getattr(default_result_ttl(opts, 60_000), field)
            assert kept is value or (kept == value and type(kept) is type(value))


def test_every_set_option_reaches_the_stored_opts_in_its_wire_name_and_order() -> None:
    from glidemq.types import Backoff, Deduplication, KeepJobs

    o = JobOptions(
        delay=5,
        priority=3,
        attempts=4,
        backoff=Backoff("exponential", 100, jitter=0.5),
        timeout=9,
        remove_on_complete=KeepJobs(count=0),
        remove_on_fail=True,
        deduplication=Deduplication("d", ttl=10),
        ignore_dependency_on_failure=True,
        job_id="x",
        ttl=7,
        result_ttl=0,  # 0: no cache, not stored
        lock_duration=1000,
        at_most_once=True,
    )
    wire = o.to_wire()
    expected = {
        "delay": 5,
        "priority": 3,
        "attempts": 4,
        "backoff": {"type": "exponential", "delay": 100, "jitter": 0.5},
        "timeout": 9,
        "removeOnComplete": {"count": 0},
        "removeOnFail": True,
        "deduplication": {"id": "d", "ttl": 10, "mode": "simple"},
        "ignoreDependencyOnFailure": True,
        "jobId": "x",
        "ttl": 7,
        "lockDuration": 1000,
        "atMostOnce": True,
    }
    assert wire == expected
    assert list(wire) == list(expected)  # the stored JSON keeps this order
    assert JobOptions(result_ttl=60_000, remove_on_fail=KeepJobs(age=5)).to_wire() == {
        "removeOnFail": {"age": 5},
        "resultTtl": 60_000,
    }
