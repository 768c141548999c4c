"""The simulated server: glidemq.memory's MemoryServer on the virtual clock, watched.

It is the real in-memory server (the real function library, run in Lua) with two additions
for the history, neither of which changes a reply: every event the library writes to a
queue's events stream is recorded as it is written (so trimming loses none), and every entry
stall recovery claims is recorded with the consumer it was taken from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..memory.client import MemoryClient
from ..memory.data import Stream
from ..memory.server import MemoryServer
from ..memory.streams import format_id, parse_id
from .loop import SimLoop

__all__ = ["GROUP", "ServerClock", "SimServer"]

GROUP = b"workers"
_RECLAIM = b"glidemq_reclaimStalled"


class ServerClock:
    """The server host's clock on virtual time (glidemq.memory.Clock)."""

    manual = False

    def __init__(self, loop: SimLoop, epoch_ms: int) -> None:
        self.loop = loop
        self.epoch_ms = epoch_ms

    def now_ms(self) -> int:
        return self.epoch_ms + int(self.loop.time() * 1000)

    def monotonic_ms(self) -> float:
        return self.loop.time() * 1000

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Virtual time never jumps under a sleeper: the loop moves it."""

    def __repr__(self) -> str:
        return "ServerClock()"


EventSink = Callable[[str, str, dict[str, str]], None]
"""(event, job id, the other fields) of an event the library wrote."""
ReclaimSink = Callable[[str, str, str, str], None]
"""(job id, entry id, consumer it was taken from) of an entry stall recovery claimed."""


class SimServer(MemoryServer):
    """The in-memory server of one simulated world."""

    def __init__(
        self, loop: SimLoop, epoch_ms: int, on_event: EventSink, on_reclaim: ReclaimSink
    ) -> None:
        super().__init__(clock=ServerClock(loop, epoch_ms))
        self.plain_client = MemoryClient(self, "server")
        """Runs the calls that arrive over the simulated connections."""
        self.on_event = on_event
        self.on_reclaim = on_reclaim
        self._function: bytes | None = None
        self._late_ms = 0  # how far behind the server's clock the running call's `now` is

    def fcall(self, a: list[bytes], *, read_only: bool) -> Any:
        self._function = a[0]
        keys = int(a[1]) if len(a) > 1 and a[1].isdigit() else 0
        first = a[2 + keys] if len(a) > 2 + keys else b""
        self._late_ms = self.clock.now_ms() - int(first) if first.isdigit() else 0
        try:
            return super().fcall(a, read_only=read_only)
        finally:
            self._function = None
            self._late_ms = 0

    def execute(self, args: list[bytes]) -> Any:
        name = args[0].upper() if args else b""
        if name == b"XCLAIM" and self._function == _RECLAIM:
            owners = self._owners(args)
            reply = super().execute(args)
            prefix = args[1].decode().removesuffix("stream")
            for item in reply:
                entry_id = item[0] if isinstance(item, list) else item
                job, owner = owners.get(entry_id, ("", ""))
                entry = entry_id.decode()
                self.on_reclaim(job, entry, owner, self._start_mark(prefix, job, entry))
            return reply
        reply = super().execute(args)
        if name == b"XADD" and args[1].endswith(b":events"):
            self._event(args)
        return reply

    def _event(self, args: list[bytes]) -> None:
        star = args.index(b"*")
        flat = args[star + 1 :]
        fields = {
            flat[i].decode(): flat[i + 1].decode(errors="replace")
            for i in range(0, len(flat) - 1, 2)
        }
        event = fields.pop("event", "")
        job = fields.pop("jobId", "")
        if abs(self._late_ms) >= 50 and self._late_ms < 10**9:
            fields["late_ms"] = str(self._late_ms)  # the call's `now` was this far behind
        self.on_event(event, job, fields)

    def _owners(self, args: list[bytes]) -> dict[bytes, tuple[str, str]]:
        """XCLAIM key group consumer min-idle id...: who holds each id now, and its job."""
        stream = self.keyspace.get(args[1])
        out: dict[bytes, tuple[str, str]] = {}
        if not isinstance(stream, Stream) or GROUP not in stream.groups:
            return out
        pending = stream.groups[GROUP].pending
        for raw in args[5:]:
            try:
                entry = parse_id(raw)
            except Exception:
                break
            p = pending.get(entry)
            fields = stream.entries.get(entry, [])
            job = ""
            for i in range(0, len(fields) - 1, 2):
                if fields[i] == b"id":
                    job = fields[i + 1].decode()
            out[format_id(entry)] = (job, "" if p is None else p.consumer.decode())
        return out

    def _start_mark(self, prefix: str, job: str, entry: str) -> str:
        """What the server knew of the start of `job` under `entry` as stall recovery claimed
        it: "held" (its worker had not started it), "unsure" (recorded, not confirmed) or
        "recorded"."""
        h = self.job_hash(f"{prefix}job:{job}") if job else {}
        if h.get("heldEntry") == entry:
            return "held"
        return "unsure" if h.get("unsureEntry") == entry else "recorded"

    def holder(self, stream_key: str, entry_id: str) -> str | None:
        """The consumer that holds `entry_id` in the queue's pending list now, if any."""
        stream = self.keyspace.get(stream_key.encode())
        if not isinstance(stream, Stream) or GROUP not in stream.groups:
            return None
        try:
            p = stream.groups[GROUP].pending.get(parse_id(entry_id.encode()))
        except Exception:
            return None
        return None if p is None else p.consumer.decode()

    def job_hash(self, key: str) -> dict[str, str]:
        """A job's hash as text (empty when it does not exist)."""
        value = self.keyspace.get(key.encode())
        if not isinstance(value, dict):
            return {}
        return {k.decode(): v.decode(errors="replace") for k, v in value.items()}
