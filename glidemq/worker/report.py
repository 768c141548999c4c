"""What a Worker tells the `glidemq.worker` logger: each failed try (job id, name, queue,
try number, exception; the traceback once the job failed for good), the connection to the
server lost and restored, and stalled jobs taken back from other workers. Successes are
never logged.

Lines that repeat are limited per kind (the same failure of many jobs of one name, a
connection that comes and goes): at most `BURST` in each `WINDOW` seconds; the rest are
counted and told in one line when the window is over. Every record carries its facts as a
`glidemq` dict attribute, which the JSON log format of glidemq-run writes as fields.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import Retry, UnrecoverableError

if TYPE_CHECKING:
    from ..job.job import Job

__all__ = ["BURST", "CONFIRM", "WINDOW", "Limiter", "WorkerReport"]

log = logging.getLogger("glidemq.worker")

BURST = 5
"""Lines of one kind logged per window; more are only counted."""
WINDOW = 10.0
"""Seconds of a window."""
CONFIRM = 1.0
"""Seconds calls must keep failing before the connection is logged as lost."""


class Limiter:
    """Counts lines per key in windows of `window` seconds and lets `burst` of each pass."""

    def __init__(
        self,
        burst: int = BURST,
        window: float = WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.window = window
        self.clock = clock
        self._windows: dict[Hashable, list[Any]] = {}  # key -> [start, passed, held back, label]

    def allow(self, key: Hashable, label: str) -> bool:
        """Whether a line of `key` may be logged now; `label` says what it is about, for the
        count of those held back."""
        now = self.clock()
        entry = self._windows.get(key)
        if entry is None or now - entry[0] >= self.window:
            if entry is not None:
                self._tell(entry)
            self._windows[key] = [now, 1, 0, label]
            return True
        if entry[1] < self.burst:
            entry[1] += 1
            return True
        entry[2] += 1
        return False

    def flush(self, everything: bool = False) -> None:
        """Tell the counts of windows that are over (all of them with `everything`)."""
        now = self.clock()
        for key, entry in list(self._windows.items()):
            if everything or now - entry[0] >= self.window:
                self._tell(entry)
                del self._windows[key]

    def _tell(self, entry: list[Any]) -> None:
        if entry[2]:
            log.warning(
                "glidemq: %d more %s in %.0f s, not logged one by one",
                entry[2],
                entry[3],
                self.window,
                extra={"glidemq": {"event": "repeated", "count": entry[2], "about": entry[3]}},
            )
            entry[2] = 0


def _attempts(job: Job[Any, Any]) -> int:
    value = job.opts.get("attempts") if isinstance(job.opts, Mapping) else None
    return value if isinstance(value, int) and value > 0 else 1


class WorkerReport:
    """The log lines of one Worker (queue `queue`, consumer `consumer`, server `where`)."""

    def __init__(self, queue: str, consumer: str, where: str | None) -> None:
        self.queue = queue
        self.consumer = consumer
        self.where = where or "the server"
        self.limiter = Limiter()
        self.failing_since: float | None = None  # monotonic: the first of the failing calls
        self.failing_at = 0.0  # wall time of the same moment
        self.logged = False  # whether this run of failures was logged as an outage
        self.detail = ""  # what the last failing call raised

    # -- failures -------------------------------------------------------------------------

    def failed(self, job: Job[Any, Any], error: BaseException, status: str, delay: int) -> None:
        """The server recorded a failed try of `job` with `status` (`retry` or `failed`);
        `delay`: ms before the next try."""
        final = status == "failed"
        kind = type(error).__name__
        tries, attempts = job.attempts_made, _attempts(job)
        label = f"failures of job {job.name!r} ({kind})"
        if not self.limiter.allow((job.name, kind, final), label):
            return
        fields = {
            "event": "job_failed" if final else "job_retry",
            "queue": self.queue,
            "job_id": job.id,
            "job_name": job.name,
            "attempt": tries,
            "attempts": attempts,
            "exception": kind,
            "error": str(error),
        }
        what = f"job {job.id} ({job.name}) of queue {self.queue!r}"
        if not final:
            fields["delay_ms"] = delay
            asked = isinstance(error, Retry)
            log.log(
                logging.INFO if asked else logging.WARNING,
                "glidemq: %s %s (try %d of %d): %s%s; next try in %d ms",
                what,
                "asked for a retry" if asked else "failed",
                tries,
                attempts,
                "" if asked else f"{kind}: ",
                error,
                delay,
                extra={"glidemq": fields},
            )
            return
        if str(error) == "revoked" and isinstance(error, UnrecoverableError):
            log.info("glidemq: %s was revoked", what, extra={"glidemq": fields})
            return
        why = "unrecoverable, " if isinstance(error, UnrecoverableError) else ""
        log.error(
            "glidemq: %s failed for good (%stry %d of %d): %s: %s",
            what,
            why,
            tries,
            attempts,
            kind,
            error,
            exc_info=(type(error), error, error.__traceback__),
            extra={"glidemq": fields},
        )

    # -- the connection -------------------------------------------------------------------

    def connection_lost(self, detail: str) -> None:
        """A call to the server failed by a time-out or a lost connection. Logged once per
        outage, once no call succeeded for `CONFIRM` s after it: a lone time-out, or the
        last replies of a server shutting down, are not an outage."""
        self.detail = detail
        if self.failing_since is not None:
            return
        self.failing_since, self.failing_at = time.monotonic(), time.time()
        with contextlib.suppress(RuntimeError):  # no loop: nothing to confirm it on
            asyncio.get_running_loop().call_later(CONFIRM, self._confirm, self.failing_since)

    def _confirm(self, since: float) -> None:
        if self.failing_since != since or self.logged:
            return  # a call succeeded meanwhile
        self.logged = True
        at = time.strftime("%H:%M:%S", time.localtime(self.failing_at))
        if self.limiter.allow("connection", "connection losses"):
            log.warning(
                "glidemq: worker %s of queue %r lost its connection to %s at %s: %s; retrying",
                self.consumer,
                self.queue,
                self.where,
                at,
                self.detail,
                extra={"glidemq": self._connection_fields("connection_lost", detail=self.detail)},
            )

    def connection_restored(self) -> None:
        """A call succeeded while calls were failing."""
        since, logged = self.failing_since, self.logged
        self.failing_since, self.logged = None, False
        if since is None or not logged:
            return
        down = time.monotonic() - since
        at = time.strftime("%H:%M:%S", time.localtime(self.failing_at))
        log.warning(
            "glidemq: worker %s of queue %r is connected to %s again, after %.1f s (lost at %s)",
            self.consumer,
            self.queue,
            self.where,
            down,
            at,
            extra={"glidemq": self._connection_fields("connection_restored", down_s=down)},
        )

    def _connection_fields(self, event: str, **more: Any) -> dict[str, Any]:
        fields = {"event": event, "queue": self.queue, "worker": self.consumer}
        return {**fields, "server": self.where, **more}

    # -- stall recovery -------------------------------------------------------------------

    def stalled(self, requeued: int, failed: int, owners: Mapping[str, int]) -> None:
        """This worker's stall scan took back `requeued` + `failed` jobs whose lock ran out,
        held by `owners` (consumer -> jobs, as seen just before)."""
        whom = ", ".join(f"{o} ({n})" for o, n in sorted(owners.items())) or "unknown workers"
        log.warning(
            "glidemq: queue %r: took back %d stalled job(s) from %s: %d to run again, %d "
            "failed for good (stalled too often)",
            self.queue,
            requeued + failed,
            whom,
            requeued,
            failed,
            extra={
                "glidemq": {
                    "event": "stalled",
                    "queue": self.queue,
                    "requeued": requeued,
                    "failed": failed,
                    "from": dict(owners),
                }
            },
        )

    def flush(self, everything: bool = False) -> None:
        """Tell the counts of repeated lines held back (periodically, and at close)."""
        self.limiter.flush(everything)
