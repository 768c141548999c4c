"""How a Worker runs its processor: in this process, or in the child processes of a sandbox
pool. `executor_for` decides once, from the options; the Worker then treats both alike.

In process, a few jobs may wait beyond the concurrency (the hold window, glidemq.worker.hold); in a
sandbox, runs may wait queued in the children instead (the pool's prefetch window), and a
run's timeout is the pool's to enforce, by killing the child.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..processor import check_processor
from ..types import WorkerOptions
from .hold import HoldWindow, default_max_held
from .slots import SlotExtension

if TYPE_CHECKING:
    from ..sandbox.pool import SandboxPool

__all__ = ["Executor", "executor_for"]


@dataclass(frozen=True)
class Executor:
    """What runs a Worker's jobs, and how many it may hold beyond its concurrency."""

    call: Callable[[Any], Any]
    """The processor as the Worker calls it (one job, or a list in batch mode)."""
    extension: SlotExtension | None
    """What `Slots` asks about room beyond the concurrency: the hold window or the pool."""
    extra: int
    """The most jobs held beyond the concurrency."""
    hold: HoldWindow | None = None
    pool: SandboxPool | None = None

    @property
    def sandboxed(self) -> bool:
        """Whether runs happen in child processes."""
        return self.pool is not None

    def timeout_of(self, job_timeout: Any) -> Any:
        """The timeout the Worker applies to a run: none in a sandbox, which kills the
        child itself."""
        return None if self.pool is not None else job_timeout

    async def start(self) -> None:
        """Start what runs outside the Worker (the sandbox's children, in the background)."""
        if self.pool is not None:
            await self.pool.start()

    async def close(self) -> None:
        """Stop it: aborted runs end, children exit and are reaped."""
        if self.pool is not None:
            await self.pool.close()


def executor_for(
    processor: Any,
    opts: WorkerOptions,
    concurrency: int,
    *,
    start_limited: bool,
    pool_hooks: dict[str, Any],
) -> Executor:
    """The executor `opts` asks for. `concurrency` counts jobs (batches times their size);
    `start_limited`: the worker limits starts itself, so it holds no job; `pool_hooks`: the
    sandbox pool's callbacks and secrets (on_error, on_room, secrets)."""
    if opts.sandbox is not None:
        from ..options.sandbox import processor_target
        from ..sandbox.pool import SandboxPool

        pool = SandboxPool(
            processor_target(processor),
            opts.sandbox,
            slots=opts.concurrency,
            batch=opts.batch is not None,
            hand_back=True,
            result_limit=opts.max_result_bytes,
            **pool_hooks,
        )
        run: Callable[[Any], Any] = pool.run_batch if opts.batch else pool.run
        return Executor(run, pool, pool.max_pipeline_slots, pool=pool)
    call = check_processor(processor)
    if opts.batch is None and opts.hold_window > 0 and not start_limited:
        depth = opts.max_held if opts.max_held is not None else default_max_held(concurrency)
        if depth > 0:
            hold = HoldWindow(concurrency, opts.hold_window / 1000, depth)
            return Executor(call, hold, depth, hold=hold)
    return Executor(call, None, 0)
