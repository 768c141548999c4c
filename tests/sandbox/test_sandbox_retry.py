"""`raise glidemq.Retry(delay=ms)` in a sandboxed processor arrives in the worker with its
delay (the error crosses the process boundary as a registered type)."""

from __future__ import annotations

from glidemq import Retry
from glidemq.sandbox.protocol import error_from_wire, error_to_wire


def test_retry_crosses_the_process_boundary_with_its_delay() -> None:
    back = error_from_wire(error_to_wire(Retry(delay=2500, reason="upstream busy")))
    assert isinstance(back, Retry)
    assert back.delay == 2500 and str(back) == "upstream busy"
