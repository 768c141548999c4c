"""Logging for the supervisor and its workers: text or JSON lines with process slot and pid.
A record's `glidemq` dict (the facts of a failed job, a lost connection, ...) becomes fields
of its JSON line; the text line already says them."""

from __future__ import annotations

import logging
import os
import sys
import time

import orjson

__all__ = ["setup_logging"]


class _Context(logging.Filter):
    def __init__(self, role: str, slot: int | None) -> None:
        super().__init__()
        self.role = role
        self.slot = slot

    def filter(self, record: logging.LogRecord) -> bool:
        record.role = self.role
        record.slot = "-" if self.slot is None else self.slot
        record.pid = os.getpid()
        return True


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "role": getattr(record, "role", "-"),
            "slot": getattr(record, "slot", "-"),
            "pid": getattr(record, "pid", os.getpid()),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        facts = getattr(record, "glidemq", None)  # job id, queue, ... (glidemq.worker.report)
        if isinstance(facts, dict):
            out.update({k: v for k, v in facts.items() if k not in out})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out).decode()


def setup_logging(fmt: str, level: str, role: str, slot: int | None = None) -> None:
    """Configure the root logger of this process (supervisor or worker `slot`)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_Context(role, slot))
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        text = logging.Formatter(
            "%(asctime)s %(levelname)-5s [%(role)s %(slot)s pid %(pid)s] %(message)s"
        )
        text.converter = time.localtime
        handler.setFormatter(text)
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper())
