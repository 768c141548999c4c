"""The Python job queues side of glidemq-bench: Celery, Dramatiq, arq, RQ, SAQ and Taskiq,
one adapter each over one shared driver. Run by the library's own virtualenv (installed by
glidemq-bench on first use, see README.md):

    <lib>/.venv/bin/python -I driver.py LIBRARY SCENARIO --port P [--host H] [--queue Q]
        [--jobs N] [--concurrency C] [--chunk N] [--server-pid P1,P2]

Prints one JSON object on stdout, the shape the other peers print. Scenarios: `add-bulk`
(each library's nearest documented way to enqueue many jobs), `add-single` (one enqueue at a
time), `add-sync` (the same, for the libraries whose enqueue is a plain sync call: Celery's
`.delay()`, RQ's `enqueue`, Dramatiq's `send`) and `process` (pre-filled no-op jobs
drained by one worker in this process, timed from worker construction to the last
completion). Anything else, or a concurrency an adapter does
not run, prints `{"jobs": 0, "unsupported": "<why>"}`. Result storage is off everywhere; each
record's `note` says what "concurrency" means for the library and every non-default setting.
Nothing here imports glidemq.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import resource
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

_TICKS = os.sysconf("SC_CLK_TCK")


def _self_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _proc_cpu(pid: int) -> float:
    """User + system CPU seconds of process `pid` (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


class Window:
    """Wall time, CPU of this process (all threads) and of the server over a window."""

    def __init__(self, server_pids: list[int]) -> None:
        self.server_pids = server_pids
        self.t0 = time.perf_counter()
        self.c0 = _self_cpu()
        self.s0 = sum(_proc_cpu(p) for p in server_pids)

    def close(self) -> dict[str, float]:
        return {
            "seconds": time.perf_counter() - self.t0,
            "client_cpu": _self_cpu() - self.c0,
            "server_cpu": sum(_proc_cpu(p) for p in self.server_pids) - self.s0,
        }


class Counter:
    """Completions counted by the no-op task; thread-safe for the thread-pool workers."""

    def __init__(self) -> None:
        self.target = 0
        self.done = 0
        self.lock = threading.Lock()
        self.finished = threading.Event()

    def hit(self) -> None:
        with self.lock:
            self.done += 1
            if self.done >= self.target > 0:
                self.finished.set()


COUNTER = Counter()


def _chunks(n: int, size: int) -> Iterator[range]:
    for start in range(0, n, size):
        yield range(start, min(n, start + size))


def _run_async(coro: Coroutine[Any, Any, Any]) -> Any:
    try:
        import uvloop

        factory: Any = uvloop.new_event_loop
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


class Adapter:
    """One library: how it enqueues, how its worker runs, what its concurrency means."""

    name = ""
    dist = ""  # the PyPI distribution whose version the record carries
    bulk_note = ""
    concurrency_note = ""
    settings_note = ""
    sync_enqueue = False  # add-sync: its add_single is a plain sync call, one job at a time

    def __init__(self, o: argparse.Namespace) -> None:
        self.o = o
        self.url = f"redis://{o.host}:{o.port}/0"

    def supports(self, concurrency: int) -> str | None:
        """Why `process` at this concurrency is not run, or None when it is."""
        return None

    def add_bulk(self) -> None:
        raise NotImplementedError

    def add_single(self) -> None:
        raise NotImplementedError

    def run_worker(self, concurrency: int) -> None:
        """Run the worker on this thread until the process exits."""
        raise NotImplementedError

    def note(self, scenario: str) -> str:
        parts = [self.bulk_note] if scenario == "add-bulk" else []
        if scenario == "process":
            parts.append(self.concurrency_note)
        parts.append(self.settings_note)
        return "; ".join(p for p in parts if p)


class CeleryAdapter(Adapter):
    name, dist = "celery", "celery"
    sync_enqueue = True  # add-single / add-sync: task.delay(i)
    bulk_note = "add-bulk: a group of task signatures, chunk jobs per group, apply_async()"
    concurrency_note = "c = threads of the worker's thread pool (--pool threads -c C)"
    settings_note = (
        "Redis broker on the Valkey, no result backend, task_ignore_result=True; pool=threads "
        "(default prefork would fork C processes); prefetch multiplier default (4)"
    )

    def __init__(self, o: argparse.Namespace) -> None:
        super().__init__(o)
        from celery import Celery

        self.app = Celery("glidemq_bench", broker=self.url)
        self.app.conf.update(
            task_ignore_result=True,
            task_default_queue=o.queue,
            broker_connection_retry_on_startup=True,
            worker_hijack_root_logger=False,
        )

        @self.app.task(name="noop")  # type: ignore[untyped-decorator]
        def noop(i: int) -> None:
            COUNTER.hit()

        self.task = noop

    def add_bulk(self) -> None:
        from celery import group

        for chunk in _chunks(self.o.jobs, self.o.chunk):
            group(self.task.s(i) for i in chunk).apply_async()

    def add_single(self) -> None:
        for i in range(self.o.jobs):
            self.task.delay(i)

    def run_worker(self, concurrency: int) -> None:
        worker = self.app.Worker(
            pool="threads", concurrency=concurrency, loglevel="WARNING", quiet=True
        )
        worker.start()


class DramatiqAdapter(Adapter):
    name, dist = "dramatiq", "dramatiq"
    sync_enqueue = True  # add-single / add-sync: actor.send(i)
    bulk_note = "add-bulk: dramatiq.group(messages).run(), chunk jobs per group"
    concurrency_note = "c = worker threads of one dramatiq.Worker (worker_threads=C)"
    settings_note = "RedisBroker on the Valkey, no Results middleware; defaults otherwise"

    def __init__(self, o: argparse.Namespace) -> None:
        super().__init__(o)
        import dramatiq
        from dramatiq.brokers.redis import RedisBroker

        self.broker = RedisBroker(host=o.host, port=o.port)
        dramatiq.set_broker(self.broker)

        @dramatiq.actor(actor_name="noop", queue_name=o.queue)  # type: ignore[untyped-decorator]
        def noop(i: int) -> None:
            COUNTER.hit()

        self.actor = noop

    def add_bulk(self) -> None:
        import dramatiq

        for chunk in _chunks(self.o.jobs, self.o.chunk):
            dramatiq.group(self.actor.message(i) for i in chunk).run()

    def add_single(self) -> None:
        for i in range(self.o.jobs):
            self.actor.send(i)

    def run_worker(self, concurrency: int) -> None:
        from dramatiq import Worker

        Worker(self.broker, worker_threads=concurrency).start()
        threading.Event().wait()


class ArqAdapter(Adapter):
    name, dist = "arq", "arq"
    bulk_note = "add-bulk: no bulk API; chunk enqueue_job() calls in flight at once (gather)"
    concurrency_note = "c = max_jobs of one arq Worker (asyncio tasks)"
    settings_note = (
        "keep_result=0; poll_delay=0.001 s (default 0.5 s sleeps between polls and caps a "
        "drain at ~200 jobs/s); defaults otherwise"
    )

    def _settings(self) -> Any:
        from arq.connections import RedisSettings

        return RedisSettings(host=self.o.host, port=self.o.port)

    async def _enqueue(self, bulk: bool) -> None:
        from arq import create_pool

        pool = await create_pool(self._settings(), default_queue_name=self.o.queue)
        if bulk:
            for chunk in _chunks(self.o.jobs, self.o.chunk):
                await asyncio.gather(*(pool.enqueue_job("noop", i) for i in chunk))
        else:
            for i in range(self.o.jobs):
                await pool.enqueue_job("noop", i)
        await pool.aclose()

    def add_bulk(self) -> None:
        _run_async(self._enqueue(True))

    def add_single(self) -> None:
        _run_async(self._enqueue(False))

    def run_worker(self, concurrency: int) -> None:
        from arq import Worker, func

        async def noop(ctx: dict[str, Any], i: int) -> None:
            COUNTER.hit()

        async def main() -> None:
            worker = Worker(
                functions=[func(noop, name="noop")], redis_settings=self._settings(),
                queue_name=self.o.queue, max_jobs=concurrency, keep_result=0,
                poll_delay=0.001, handle_signals=False,
            )  # fmt: skip
            await worker.main()

        _run_async(main())


def noop_rq(i: int) -> None:
    """RQ's task: RQ imports it by name (`__main__.noop_rq`) in the worker."""
    COUNTER.hit()


# By name: RQ refuses a function object from __main__ (the worker here is this process).
_RQ_TASK = "__main__.noop_rq"


class RqAdapter(Adapter):
    name, dist = "rq", "rq"
    sync_enqueue = True  # add-single / add-sync: queue.enqueue(fn, i)
    bulk_note = "add-bulk: Queue.enqueue_many(prepare_data(...)), chunk jobs per call"
    concurrency_note = "c = 1: one SimpleWorker runs one job at a time in this process"
    settings_note = (
        "result_ttl=0; SimpleWorker (the default Worker forks a child per job, far slower); "
        "defaults otherwise"
    )

    def __init__(self, o: argparse.Namespace) -> None:
        super().__init__(o)
        from redis import Redis
        from rq import Queue

        self.redis = Redis(host=o.host, port=o.port)
        self.queue = Queue(o.queue, connection=self.redis)

    def supports(self, concurrency: int) -> str | None:
        if concurrency == 1:
            return None
        return (
            "an RQ worker runs one job at a time; concurrency C means C worker processes "
            "(WorkerPool), not a single-process worker"
        )

    def add_bulk(self) -> None:
        from rq import Queue

        for chunk in _chunks(self.o.jobs, self.o.chunk):
            self.queue.enqueue_many(
                [Queue.prepare_data(_RQ_TASK, (i,), result_ttl=0) for i in chunk]
            )

    def add_single(self) -> None:
        for i in range(self.o.jobs):
            self.queue.enqueue(_RQ_TASK, i, result_ttl=0)

    def run_worker(self, concurrency: int) -> None:
        from rq import SimpleWorker

        SimpleWorker([self.queue], connection=self.redis).work(logging_level="WARNING")
        threading.Event().wait()


class SaqAdapter(Adapter):
    name, dist = "saq", "saq"
    bulk_note = "add-bulk: no bulk API; chunk enqueue() calls in flight at once (gather)"
    concurrency_note = "c = concurrency of one saq Worker (asyncio tasks)"
    settings_note = "jobs enqueued with ttl=-1 (no job or result kept); defaults otherwise"

    def _queue(self) -> Any:
        from saq import Queue

        return Queue.from_url(self.url, name=self.o.queue)

    async def _enqueue(self, bulk: bool) -> None:
        queue = self._queue()
        await queue.connect()
        if bulk:
            for chunk in _chunks(self.o.jobs, self.o.chunk):
                await asyncio.gather(*(queue.enqueue("noop", i=i, ttl=-1) for i in chunk))
        else:
            for i in range(self.o.jobs):
                await queue.enqueue("noop", i=i, ttl=-1)
        await queue.disconnect()

    def add_bulk(self) -> None:
        _run_async(self._enqueue(True))

    def add_single(self) -> None:
        _run_async(self._enqueue(False))

    def run_worker(self, concurrency: int) -> None:
        from saq import Worker

        async def noop(ctx: Any, *, i: int) -> None:
            COUNTER.hit()

        async def main() -> None:
            queue = self._queue()
            await queue.connect()
            worker = Worker(queue, functions=[("noop", noop)], concurrency=concurrency)
            await worker.start()

        _run_async(main())


class TaskiqAdapter(Adapter):
    name, dist = "taskiq", "taskiq"
    bulk_note = "add-bulk: no bulk API; chunk kiq() calls in flight at once (gather)"
    concurrency_note = "c = max_async_tasks of one Receiver (the worker CLI's --max-async-tasks)"
    settings_note = (
        "taskiq-redis RedisStreamBroker (consumer group), no result backend; defaults otherwise"
    )

    def __init__(self, o: argparse.Namespace) -> None:
        super().__init__(o)
        from taskiq_redis import RedisStreamBroker

        self.broker = RedisStreamBroker(self.url, queue_name=o.queue)

        @self.broker.task(task_name="noop")  # type: ignore[untyped-decorator]
        async def noop(i: int) -> None:
            COUNTER.hit()

        self.task = noop

    async def _enqueue(self, bulk: bool) -> None:
        if bulk:
            for chunk in _chunks(self.o.jobs, self.o.chunk):
                await asyncio.gather(*(self.task.kiq(i) for i in chunk))
        else:
            for i in range(self.o.jobs):
                await self.task.kiq(i)

    async def _client(self, bulk: bool) -> None:
        await self.broker.startup()
        await self._enqueue(bulk)
        await self.broker.shutdown()

    def add_bulk(self) -> None:
        _run_async(self._client(True))

    def add_single(self) -> None:
        _run_async(self._client(False))

    def prefill_and_run_worker(self, concurrency: int, start: Callable[[], None]) -> None:
        """The stream's consumer group starts at `$`: create it (worker start-up) before
        the jobs go in, or the worker never sees them."""
        from taskiq.receiver import Receiver

        async def main() -> None:
            self.broker.is_worker_process = True
            await self.broker.startup()
            await self._enqueue(True)
            start()
            receiver = Receiver(self.broker, max_async_tasks=concurrency, run_startup=False)
            await receiver.listen(asyncio.Event())

        _run_async(main())


ADAPTERS: dict[str, type[Adapter]] = {
    a.name: a
    for a in (CeleryAdapter, DramatiqAdapter, ArqAdapter, RqAdapter, SaqAdapter, TaskiqAdapter)
}
SCENARIOS = ("add-bulk", "add-single", "add-sync", "process")


def _emit(result: dict[str, Any]) -> None:
    # fd 1 directly: some workers replace sys.stdout with a logging proxy.
    os.write(1, (json.dumps(result) + "\n").encode())


def run(o: argparse.Namespace) -> dict[str, Any] | None:
    """Run one scenario; returns the result, or None when `process` emitted it and exits."""
    adapter = ADAPTERS[o.library](o)
    base = {
        "system": o.library, "scenario": o.scenario, "pid": os.getpid(),
        "version": importlib.metadata.version(adapter.dist), "note": adapter.note(o.scenario),
    }  # fmt: skip
    if o.scenario not in SCENARIOS:
        return {**base, "jobs": 0, "unsupported": f"not implemented by the {o.library} peer"}
    if o.scenario == "add-sync" and not adapter.sync_enqueue:
        return {**base, "jobs": 0, "unsupported": f"{o.library} enqueues from async code only"}
    if o.scenario in ("add-bulk", "add-single", "add-sync"):
        w = Window(o.server_pids)
        adapter.add_bulk() if o.scenario == "add-bulk" else adapter.add_single()
        return {**base, "jobs": o.jobs, **w.close()}
    why = adapter.supports(o.concurrency)
    if why is not None:
        return {**base, "jobs": 0, "unsupported": why}
    COUNTER.target = o.jobs
    window: list[Window] = []

    def start() -> None:
        window.append(Window(o.server_pids))

    def finish() -> None:
        COUNTER.finished.wait()
        _emit({**base, "jobs": o.jobs, **window[0].close()})
        # The worker owns the main thread and its own shutdown dance: the measurement is
        # done and the harness flushes the server before the next run.
        os._exit(0)

    threading.Thread(target=finish, daemon=True).start()
    if isinstance(adapter, TaskiqAdapter):
        adapter.prefill_and_run_worker(o.concurrency, start)
    else:
        adapter.add_bulk()
        start()
        adapter.run_worker(o.concurrency)
    threading.Event().wait()
    return None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="driver.py")
    p.add_argument("library", choices=sorted(ADAPTERS))
    p.add_argument("scenario")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=6379)
    p.add_argument("--queue", default="bench-pyq")
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--concurrency", type=int, default=100)
    p.add_argument("--chunk", type=int, default=1000)
    p.add_argument("--server-pid", default="")
    # Accepted for the harness's common flag set; these scenarios do not use them.
    for flag in ("--inflight", "--rate", "--seconds", "--procs", "--batch", "--queues"):
        p.add_argument(flag, default="")
    p.add_argument("--url", default="")
    p.add_argument("--raw-out", default="")
    return p


def main(argv: list[str] | None = None) -> int:
    o = build_parser().parse_args(argv)
    o.server_pids = [int(p) for p in o.server_pid.split(",") if p]
    result = run(o)
    if result is not None:
        _emit(result)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
