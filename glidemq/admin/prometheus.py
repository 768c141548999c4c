"""The queue metrics in the Prometheus text format, as `glidemq-run --metrics-port` and
`glidemq exporter` both serve them: the same names, labels and help text from either, so one
query reads both (docs/DEPLOY.md has the PromQL)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from ..queue.backlog import Backlog

__all__ = ["BACKLOG_KINDS", "Family", "family", "label_value", "queue_metrics", "sample"]

BACKLOG_KINDS = ("waiting", "prioritized", "due", "grouped")
"""The parts of `glidemq_queue_backlog`, the `kind` label of `glidemq_queue_backlog_jobs`."""

Family = list[str]


def label_value(value: object) -> str:
    """A label value escaped for the text format (backslash, quote, newline)."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def sample(name: str, value: float, labels: Mapping[str, object] | None = None) -> str:
    """One sample line."""
    if labels:
        inner = ",".join(f'{k}="{label_value(v)}"' for k, v in labels.items())
        return f"{name}{{{inner}}} {value}"
    return f"{name} {value}"


def family(name: str, kind: str, help_text: str, rows: Iterable[str]) -> Family:
    """A metric family: its HELP and TYPE lines, then its samples."""
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *rows]


def queue_metrics(
    counts: Mapping[str, Mapping[str, int]], backlogs: Mapping[str, Backlog]
) -> Family:
    """The per-queue families: jobs by state (`counts`: queue -> `JobCounts.as_dict()`) and
    the backlog of each queue in `backlogs`."""
    out = family(
        "glidemq_queue_jobs",
        "gauge",
        "Jobs in each state, per queue.",
        (
            sample("glidemq_queue_jobs", n, {"queue": q, "state": state})
            for q, by_state in sorted(counts.items())
            for state, n in sorted(by_state.items())
        ),
    )
    ordered = sorted(backlogs.items())

    def per_queue(name: str, help_text: str, value: Callable[[Backlog], float]) -> None:
        rows = (sample(name, value(b), {"queue": q}) for q, b in ordered)
        out.extend(family(name, "gauge", help_text, rows))

    per_queue(
        "glidemq_queue_backlog",
        "Jobs waiting to start: waiting + prioritized + delayed that are due + parked in groups.",
        lambda b: b.to_start,
    )
    out.extend(
        family(
            "glidemq_queue_backlog_jobs",
            "gauge",
            "The parts of glidemq_queue_backlog.",
            (
                sample("glidemq_queue_backlog_jobs", getattr(b, kind), {"queue": q, "kind": kind})
                for q, b in ordered
                for kind in BACKLOG_KINDS
            ),
        )
    )
    per_queue(
        "glidemq_queue_active", "Jobs running on any worker of the queue.", lambda b: b.active
    )
    per_queue(
        "glidemq_queue_oldest_waiting_seconds",
        "Seconds since the oldest job waiting to start became ready (0: none waits).",
        lambda b: b.oldest_age,
    )
    per_queue("glidemq_queue_paused", "1 while the queue is paused.", lambda b: int(b.paused))
    per_queue(
        "glidemq_queue_read_timestamp_seconds",
        "When the queue's backlog was read (Unix time).",
        lambda b: b.now / 1000,
    )
    return out
