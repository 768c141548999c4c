"""A job's timeline for people: its events in words, in order, with runs of progress
updates folded into one row (a long job reports progress many times)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..events import QueueEvent

__all__ = ["Row", "rows_of"]

_WAITING_REASONS = {
    "retried": "sent back to waiting (retry)",
    "returned": "handed back unstarted",
    "deferred": "put back to wait",
}


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the timeline: when (epoch ms), what, and how many events it stands for."""

    at: int
    what: str
    detail: str = ""
    count: int = 1
    kind: str = ""


def _at(event: QueueEvent) -> int:
    head = event.id.partition("-")[0]
    return int(head) if head.isdigit() else 0


def _short(text: str, most: int = 160) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def _row(event: QueueEvent) -> Row:
    f, at, kind = event.fields, _at(event), event.event
    if kind == "added":
        return Row(at, "added", f.get("name", ""), kind=kind)
    if kind == "active":
        return Row(at, "started", kind=kind)
    if kind == "completed":
        if "returnvalue" in f:
            return Row(at, "completed", "returned " + _short(f["returnvalue"]), kind=kind)
        return Row(at, "completed", f"returned {f.get('returnvalueBytes', '?')} bytes", kind=kind)
    if kind == "failed":
        return Row(at, "failed", _short(f.get("failedReason", "")), kind=kind)
    if kind == "retrying":
        tries = f.get("attemptsMade", "?")
        reason = _short(f.get("failedReason", ""))
        return Row(at, f"try {tries} failed, will retry", reason, kind=kind)
    if kind == "progress":
        return Row(at, "progress", _short(f.get("data", ""), 80), kind=kind)
    if kind == "stalled":
        return Row(at, "stalled: its worker stopped answering; taken back", kind=kind)
    if kind == "waiting":
        return Row(at, _WAITING_REASONS.get(f.get("reason", ""), "waiting"), kind=kind)
    if kind == "revoked":
        return Row(at, "cancel requested", "it was running" if f else "", kind=kind)
    if kind == "waiting-children":
        return Row(at, "waiting for its children", kind=kind)
    detail = ", ".join(f"{k} {_short(v, 60)}" for k, v in f.items())
    return Row(at, kind.replace("-", " ") or "event", detail, kind=kind)


def rows_of(events: Iterable[QueueEvent]) -> list[Row]:
    """The rows of a job's events (oldest first); consecutive progress events become one
    row that keeps the last value and says how many there were."""
    out: list[Row] = []
    for event in events:
        row = _row(event)
        last = out[-1] if out else None
        if row.kind == "progress" and last is not None and last.kind == "progress":
            out[-1] = Row(row.at, "progress", row.detail, last.count + 1, "progress")
        else:
            out.append(row)
    return out
