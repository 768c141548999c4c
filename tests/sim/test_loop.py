"""The simulator's loop: time is virtual and jumps to the next timer, a frozen process's
callbacks wait and run in order when it thaws, a killed one's never run, and a function
given to run_in_executor runs on the loop (no threads)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from glidemq.sim.loop import Deadlock, Process, SimLoop, current_process


def _run(loop: SimLoop, main: object) -> object:
    try:
        return loop.run_until_complete(main)  # type: ignore[arg-type]
    finally:
        loop.close()


def test_an_hour_of_sleeps_takes_no_real_time() -> None:
    loop = SimLoop(start=100.0)

    async def main() -> float:
        await asyncio.sleep(3600)
        return asyncio.get_running_loop().time()

    began = time.perf_counter()
    assert _run(loop, main()) == pytest.approx(3700.0, abs=0.01)
    assert time.perf_counter() - began < 1.0


def test_a_frozen_process_catches_up_in_order_when_it_thaws() -> None:
    loop = SimLoop()
    seen: list[tuple[str, float]] = []
    p = Process("w1")

    async def ticker() -> None:
        for i in range(3):
            await asyncio.sleep(1)
            assert current_process() is p
            seen.append((f"tick{i}", asyncio.get_running_loop().time() - 1000))

    async def main() -> None:
        p.spawn(ticker())
        await asyncio.sleep(0.5)
        loop.freeze(p)
        await asyncio.sleep(5)
        assert seen == []
        loop.thaw(p)
        await asyncio.sleep(3)

    _run(loop, main())
    assert [name for name, _ in seen] == ["tick0", "tick1", "tick2"]
    assert seen[0][1] == pytest.approx(5.5, abs=0.01)  # due at 1.0, run at the thaw


def test_a_killed_process_runs_nothing_again_not_even_finally() -> None:
    loop = SimLoop()
    ran: list[str] = []
    p = Process("w1")

    async def victim() -> None:
        try:
            await asyncio.sleep(1)
            ran.append("after")
        finally:
            ran.append("finally")

    async def main() -> None:
        p.spawn(victim())
        await asyncio.sleep(0.5)
        loop.kill(p)
        await asyncio.sleep(5)

    _run(loop, main())
    assert ran == []


def test_run_in_executor_runs_on_the_loop_thread() -> None:
    loop = SimLoop()
    main_thread = threading.get_ident()

    async def main() -> int:
        return await asyncio.to_thread(threading.get_ident)

    assert _run(loop, main()) == main_thread


def test_waiting_for_nothing_is_a_deadlock() -> None:
    loop = SimLoop()

    async def main() -> None:
        await asyncio.get_running_loop().create_future()

    with pytest.raises(Deadlock):
        _run(loop, main())
