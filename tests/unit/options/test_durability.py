"""The durability option: its checks, the command it waits with, what counts as confirmed,
and how ConnectionOptions, URLs and the front ends carry it."""

from __future__ import annotations

import pytest

from glidemq import (
    ConnectionOptions,
    Durability,
    DurabilityError,
    DurabilityTimeoutError,
    GlideMQError,
    Producer,
    Queue,
    UnsupportedOptionError,
    ValidationError,
    Worker,
)
from glidemq.client.functions import UNCONFIRMED_WRITES, needs_no_wait, read_only_functions
from glidemq.memory import MemoryServer
from glidemq.options.durability import coerce_durability
from glidemq.wire.layout import LAYOUTS


async def _noop(job: object) -> None:
    return None


def test_replicated_waits_for_one_replica_by_default() -> None:
    d = Durability("replicated")
    assert d.wanted == 1
    assert d.command() == ["WAIT", "1", "1000"]


def test_fsync_waits_for_the_local_aof_and_no_replica_by_default() -> None:
    d = Durability("fsync", timeout_ms=250)
    assert d.command() == ["WAITAOF", "1", "0", "250"]
    assert Durability("fsync", replicas=2).command() == ["WAITAOF", "1", "2", "1000"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"mode": "quorum"}, "durability"),
        ({"mode": "replicated", "replicas": 0}, "replicas"),
        ({"mode": "replicated", "replicas": True}, "replicas"),
        ({"mode": "replicated", "timeout_ms": 0}, "durability_timeout_ms"),
        ({"mode": "fsync", "replicas": -1}, "replicas"),
    ],
)
def test_bad_values_are_refused_naming_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        Durability(**kwargs)  # type: ignore[arg-type]
    assert err.value.field == field


def test_confirmation_is_met_only_by_enough_replicas() -> None:
    d = Durability("replicated", replicas=2)
    assert d.confirmed(2) == (True, "2 of 2 replica(s)")
    assert d.confirmed(1) == (False, "1 of 2 replica(s)")
    f = Durability("fsync")
    assert f.confirmed([1, 0])[0]
    assert not f.confirmed([0, 0])[0]
    assert not Durability("fsync", replicas=1).confirmed([1, 0])[0]


def test_mode_names_and_off() -> None:
    assert coerce_durability(None) is None
    assert coerce_durability("none") is None
    assert coerce_durability("Replicated", replicas=2) == Durability("replicated", 2, 1000)
    with pytest.raises(ValidationError):
        coerce_durability("none", replicas=1)  # numbers without a mode mean a mistake
    with pytest.raises(ValidationError):
        coerce_durability(3)


def test_connection_options_take_a_mode_name_and_keep_it_in_the_url() -> None:
    conn = ConnectionOptions.from_url(
        "valkey://h1:7000,h2:7001?durability=replicated&replicas=2&durability_timeout_ms=300"
    )
    assert conn.confirmation == Durability("replicated", 2, 300)
    assert ConnectionOptions.from_url(conn.url) == conn
    assert ConnectionOptions(durability="fsync").confirmation == Durability("fsync", 0, 1000)
    assert ConnectionOptions().confirmation is None
    assert "durability" not in ConnectionOptions().url


def test_front_ends_override_the_connection() -> None:
    base = ConnectionOptions()
    q = Queue("q", connection=base, durability="replicated")
    assert q.connection.confirmation == Durability("replicated")
    w: Worker[object, None] = Worker("q", _noop, connection=base, durability="fsync")
    assert w.connection.confirmation == Durability("fsync")
    p: Producer[object, object] = Producer("q", connection=base, durability="replicated")
    assert p.connection.confirmation is not None
    kept = base.with_durability("replicated", replicas=2)
    assert Queue("q", connection=kept).connection.confirmation == Durability("replicated", 2)
    assert kept.with_durability(None, timeout_ms=50).confirmation == Durability("replicated", 2, 50)
    assert kept.with_durability("none").confirmation is None


def test_an_in_process_server_refuses_durability() -> None:
    with pytest.raises(UnsupportedOptionError):
        ConnectionOptions(backend=MemoryServer(), durability="replicated")


def test_the_error_names_the_jobs_and_says_the_write_may_survive() -> None:
    exc = DurabilityTimeoutError("glidemq_addBulk", "0 of 1 replica(s)", 1000, reply=[b"7"])
    named = exc.naming(["7", "8"])
    assert isinstance(named, DurabilityTimeoutError)
    assert isinstance(named, DurabilityError)
    assert isinstance(named, GlideMQError)
    assert isinstance(named, TimeoutError)
    assert named.job_ids == ["7", "8"]
    assert named.reply == [b"7"]
    text = str(named)
    assert "7, 8" in text and "1000 ms" in text and "may or may not survive" in text


def test_read_only_functions_are_the_no_writes_ones() -> None:
    names = read_only_functions()
    assert {"glidemq_getCounts", "glidemq_version", "glidemq_nextDue"} <= names
    assert not {"glidemq_add", "glidemq_addBulk", "glidemq_completeAndFetchNext"} & names


def test_every_acknowledged_change_waits() -> None:
    # only reads and the worker loops' own bookkeeping skip the wait; every change a
    # caller is told of (adds, completion, failure, job edits, flows, admin) waits
    skipped = needs_no_wait()
    assert skipped == read_only_functions() | set(UNCONFIRMED_WRITES)
    for name in LAYOUTS:
        if name in ("glidemq_promote", "glidemq_reclaimStalled", "glidemq_heartbeat"):
            assert name in skipped
        elif name not in UNCONFIRMED_WRITES and name not in read_only_functions():
            assert name not in skipped, name
    assert {"glidemq_fail", "glidemq_removeJob", "glidemq_updateJob", "glidemq_addTree"}.isdisjoint(
        skipped
    )


def test_glidemq_run_flags_and_environment_set_the_fleet_durability() -> None:
    from glidemq.runtime.cli import _connection
    from glidemq.runtime.config import parse_config

    argv = ["app:process", "--queue", "q", "--url", "valkey://h:1"]
    cfg = parse_config([*argv, "--durability", "replicated", "--replicas", "2"], env={})
    assert _connection(cfg).confirmation == Durability("replicated", 2, 1000)
    env = {"GLIDEMQ_DURABILITY": "fsync", "GLIDEMQ_DURABILITY_TIMEOUT": "250"}
    assert _connection(parse_config(argv, env=env)).confirmation == Durability("fsync", 0, 250)
    assert _connection(parse_config(argv, env={})).confirmation is None
    with pytest.raises(ValidationError):  # numbers without a mode
        _connection(parse_config([*argv, "--replicas", "2"], env={}))


def test_tasks_take_durability_from_their_declaration_or_the_defaults() -> None:
    import glidemq

    @glidemq.task("q", connection="valkey://h:1", durability="replicated")
    def declared() -> None: ...

    @glidemq.task("q", connection="valkey://h:1")
    def plain() -> None: ...

    assert declared._where()[0].confirmation == Durability("replicated")
    assert plain._where()[0].confirmation is None
    try:
        glidemq.configure_tasks(durability="replicated")
        assert plain._where()[0].confirmation == Durability("replicated")
    finally:
        glidemq.configure_tasks()
    assert plain._where()[0].confirmation is None
