"""Key names of a queue (`glide:{name}:*`) and validation of queue names, job ids and job
names."""

from __future__ import annotations

import binascii
import re

from .errors import ValidationError

__all__ = [
    "CLUSTER_SLOTS",
    "DEFAULT_PREFIX",
    "MAX_JOB_NAME",
    "QueueKeys",
    "hash_slot",
    "queue_slot",
    "validate_job_id",
    "validate_job_name",
    "validate_queue_name",
]

DEFAULT_PREFIX = "glide"
# Braces would break the hash tag, ':' the key layout, glob characters the SCAN of obliterate.
_BAD_NAME = re.compile(r"[{}:*?\[\]\\\s\x00-\x1f\x7f]")
_BAD_ID = re.compile(r"[{}:\x00-\x1f\x7f]")
MAX_QUEUE_NAME = 200
MAX_JOB_ID = 256
MAX_JOB_NAME = 1024
"""The longest job name, in bytes of UTF-8 (the server counts bytes, and refuses longer ones)."""
CLUSTER_SLOTS = 16384


def hash_slot(key: str | bytes) -> int:
    """The cluster slot of a key: CRC16 (XMODEM) of its hash tag, or of the whole key when it
    has none, modulo 16384 (as Valkey computes it)."""
    raw = key.encode() if isinstance(key, str) else key
    start = raw.find(b"{")
    if start >= 0:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            raw = raw[start + 1 : end]
    return binascii.crc_hqx(raw, 0) % CLUSTER_SLOTS


def queue_slot(name: str) -> int:
    """The cluster slot every key of queue `name` lives in (its name is the hash tag)."""
    return hash_slot("{" + validate_queue_name(name) + "}")


def validate_queue_name(name: object) -> str:
    """Return `name` if it is usable as a queue name, else raise ValidationError."""
    if not isinstance(name, str) or not name:
        raise ValidationError("queue", "must be a non-empty string")
    if len(name) > MAX_QUEUE_NAME:
        raise ValidationError("queue", f"longer than {MAX_QUEUE_NAME} characters")
    if _BAD_NAME.search(name):
        raise ValidationError(
            "queue", f"{name!r} contains a forbidden character (braces, ':', glob, space, control)"
        )
    return name


def validate_prefix(prefix: object) -> str:
    """Return `prefix` if it is usable as a key prefix, else raise ValidationError."""
    if not isinstance(prefix, str) or not prefix or _BAD_NAME.search(prefix):
        raise ValidationError("prefix", f"{prefix!r} is not a valid key prefix")
    return prefix


def validate_job_id(job_id: object, field: str = "job_id") -> str:
    """Return a custom job id if it follows the wire protocol's rules, else raise."""
    if not isinstance(job_id, str) or not job_id:
        raise ValidationError(field, "must be a non-empty string")
    if len(job_id.encode()) > MAX_JOB_ID:  # the server counts bytes
        raise ValidationError(field, f"longer than {MAX_JOB_ID} bytes")
    if _BAD_ID.search(job_id):
        raise ValidationError(field, f"{job_id!r} contains braces, ':' or control characters")
    return job_id


def validate_job_name(name: object, field: str = "name") -> str:
    """Return a job name if it is a string of 1 to MAX_JOB_NAME bytes (UTF-8), else raise."""
    if not isinstance(name, str):
        raise ValidationError(field, "must be a string")
    if not name:
        raise ValidationError(field, "must not be empty")
    if len(name) > MAX_JOB_NAME // 4 and len(name.encode(errors="surrogatepass")) > MAX_JOB_NAME:
        raise ValidationError(field, f"longer than {MAX_JOB_NAME} bytes")
    return name


class QueueKeys:
    """Every key of one queue, built once (the worker uses them on every call)."""

    __slots__ = (
        "base",
        "completed",
        "dedup",
        "dlq",
        "events",
        "failed",
        "id",
        "meta",
        "name",
        "prefix",
        "scheduled",
        "stream",
    )

    def __init__(self, name: str, prefix: str = DEFAULT_PREFIX) -> None:
        self.name = validate_queue_name(name)
        self.prefix = validate_prefix(prefix)
        self.base = f"{prefix}:{{{name}}}:"
        self.id = self.base + "id"
        self.stream = self.base + "stream"
        self.scheduled = self.base + "scheduled"
        self.completed = self.base + "completed"
        self.failed = self.base + "failed"
        self.dlq = self.base + "dlq"
        self.events = self.base + "events"
        self.meta = self.base + "meta"
        self.dedup = self.base + "dedup"

    def job(self, job_id: str) -> str:
        """Key of the job's hash."""
        return f"{self.base}job:{job_id}"

    def log(self, job_id: str) -> str:
        """Key of the job's log list."""
        return f"{self.base}log:{job_id}"

    def __repr__(self) -> str:
        return f"QueueKeys({self.name!r}, prefix={self.prefix!r})"
