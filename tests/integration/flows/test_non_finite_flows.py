"""Flows refuse NaN and Infinity in any job's data before anything is written."""

from __future__ import annotations

import math
from typing import Any

import pytest

from glidemq import ConnectionOptions, FlowJob, FlowProducer, Queue, ValidationError


@pytest.mark.parametrize("bad", [math.nan, math.inf, {"deep": [-math.inf]}], ids=repr)
async def test_flow_with_nan_or_infinity_in_a_child_is_refused_whole(
    queue: Queue[Any, Any], conn: ConnectionOptions, bad: Any
) -> None:
    flow = FlowJob(
        "parent",
        queue.name,
        {"ok": 1},
        children=[FlowJob("c1", queue.name, {"ok": 2}), FlowJob("c2", queue.name, bad)],
    )
    async with FlowProducer(connection=conn) as producer:
        with pytest.raises(ValidationError, match="NaN or Infinity"):
            await producer.add(flow)
    counts = await queue.get_job_counts()
    assert counts.waiting == counts.waiting_children == 0, counts
