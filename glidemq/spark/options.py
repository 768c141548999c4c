"""Options of the `glidemq` data source, parsed and checked before any task runs.

Spark hands a data source its options as a case-insensitive mapping of strings. Each
direction (read, write) accepts its own set; an unknown or misspelled option is an error that
names the closest known one, not something silently ignored.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass

from ..client.connection import ConnectionOptions, resolve_connection
from ..errors import ValidationError
from ..keys import DEFAULT_PREFIX, validate_prefix, validate_queue_name
from ..types import MAX_DELAY, MAX_PRIORITY

__all__ = ["STATES", "ReadOptions", "WriteOptions"]

STATES = ("waiting", "active", "delayed", "prioritized", "completed", "failed", "dead_letter")

_COMMON = ("url", "queue", "prefix", "batchSize")
_READ = (*_COMMON, "states", "partitionSize")
_WRITE = (
    *_COMMON,
    "name",
    "nameColumn",
    "dataColumn",
    "jobIdColumn",
    "delayColumn",
    "priorityColumn",
    "attemptsColumn",
    "optsColumn",
    "delay",
    "priority",
    "attempts",
    "compression",
)


def _field(name: str) -> str:
    return f"option {name!r}"


def _canonical(
    options: Mapping[str, str], known: tuple[str, ...], direction: str
) -> dict[str, str]:
    """The options keyed by their documented spelling; unknown names raise."""
    by_lower = {k.lower(): k for k in known}
    out: dict[str, str] = {}
    for key, value in options.items():
        if key.lower() == "path":  # load(path) / save(path): the queue, as a shorthand
            key = "queue"
        canon = by_lower.get(key.lower())
        if canon is None:
            hint = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.6)
            extra = f" (did you mean {by_lower[hint[0]]!r}?)" if hint else ""
            raise ValidationError(
                _field(key),
                f"unknown option for {direction} the glidemq source{extra}; "
                f"known: {', '.join(known)}",
            )
        out[canon] = value
    return out


def _int(opts: Mapping[str, str], name: str, default: int, *, low: int, high: int) -> int:
    raw = opts.get(name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValidationError(_field(name), f"must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise ValidationError(_field(name), f"must be between {low} and {high}, got {value}")
    return value


def _bool(opts: Mapping[str, str], name: str) -> bool:
    raw = str(opts.get(name, "false")).strip().lower()
    if raw in ("true", "1", "yes"):
        return True
    if raw in ("false", "0", "no"):
        return False
    raise ValidationError(_field(name), f"must be true or false, got {raw!r}")


def _common(opts: Mapping[str, str]) -> tuple[ConnectionOptions, str, str]:
    queue = opts.get("queue")
    if queue is None or not str(queue).strip():
        raise ValidationError(_field("queue"), 'is required: .option("queue", "<queue name>")')
    validate_queue_name(queue)
    prefix = validate_prefix(opts.get("prefix", DEFAULT_PREFIX))
    url = opts.get("url")
    # Resolved here, on the driver: a missing url means the driver's GLIDEMQ_URL (or the
    # default), never whatever an executor's environment happens to say.
    connection = resolve_connection(url if url else None)
    return connection, queue, prefix


@dataclass(frozen=True)
class ReadOptions:
    """What to read: the queue, its states, and how to cut it into partitions."""

    connection: ConnectionOptions
    queue: str
    prefix: str = DEFAULT_PREFIX
    states: tuple[str, ...] = STATES
    partition_size: int = 20_000
    batch_size: int = 1000

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        """Options from a Spark reader's `.option(...)` calls."""
        opts = _canonical(options, _READ, "reading from")
        connection, queue, prefix = _common(opts)
        raw_states = opts.get("states")
        states: tuple[str, ...] = STATES
        if raw_states is not None:
            names = [s.strip().lower() for s in str(raw_states).split(",") if s.strip()]
            if not names:
                raise ValidationError(
                    _field("states"), f"is empty; use some of {', '.join(STATES)}"
                )
            for name in names:
                if name not in STATES:
                    raise ValidationError(
                        _field("states"),
                        f"unknown state {name!r}; use a comma-separated list of "
                        f"{', '.join(STATES)}",
                    )
            states = tuple(s for s in STATES if s in names)
        return cls(
            connection=connection,
            queue=queue,
            prefix=prefix,
            states=states,
            partition_size=_int(opts, "partitionSize", 20_000, low=1, high=10_000_000),
            batch_size=_int(opts, "batchSize", 1000, low=1, high=100_000),
        )


@dataclass(frozen=True)
class WriteOptions:
    """How rows become jobs: where the name, data, id and per-job options come from."""

    connection: ConnectionOptions
    queue: str
    prefix: str = DEFAULT_PREFIX
    name: str | None = None
    name_column: str | None = None
    data_column: str | None = None
    job_id_column: str | None = None
    delay_column: str | None = None
    priority_column: str | None = None
    attempts_column: str | None = None
    opts_column: str | None = None
    delay: int = 0
    priority: int = 0
    attempts: int = 1
    batch_size: int = 1000
    compression: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        """Options from a Spark writer's `.option(...)` calls."""
        opts = _canonical(options, _WRITE, "writing to")
        connection, queue, prefix = _common(opts)
        if opts.get("name") is not None and opts.get("nameColumn") is not None:
            raise ValidationError(_field("name"), "give either 'name' or 'nameColumn', not both")
        return cls(
            connection=connection,
            queue=queue,
            prefix=prefix,
            name=opts.get("name"),
            name_column=opts.get("nameColumn"),
            data_column=opts.get("dataColumn"),
            job_id_column=opts.get("jobIdColumn"),
            delay_column=opts.get("delayColumn"),
            priority_column=opts.get("priorityColumn"),
            attempts_column=opts.get("attemptsColumn"),
            opts_column=opts.get("optsColumn"),
            delay=_int(opts, "delay", 0, low=0, high=MAX_DELAY),
            priority=_int(opts, "priority", 0, low=0, high=MAX_PRIORITY),
            attempts=_int(opts, "attempts", 1, low=1, high=1_000_000),
            batch_size=_int(opts, "batchSize", 1000, low=1, high=100_000),
            compression=_bool(opts, "compression"),
        )
