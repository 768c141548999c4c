"""Processors as the runtime finds them: `module:attr`, plain or decorated with `processor`."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ValidationError

__all__ = ["ProcessorSpec", "load_processor", "processor"]


@dataclass(frozen=True)
class ProcessorSpec:
    """A processor with the queue(s) it serves and Worker options for it.

    `batch=True` means the function takes a list of jobs and returns a list of results.
    """

    function: Callable[..., Any]
    queues: tuple[str, ...] = ()
    batch: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_async(self) -> bool:
        fn = self.function
        return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def processor(
    queue: str | tuple[str, ...] | list[str] | None = None,
    *,
    batch: bool = False,
    **options: Any,
) -> Callable[[Callable[..., Any]], ProcessorSpec]:
    """Declare a processor's queue(s) and Worker options for `glidemq-run`.

    @glidemq.processor("emails", concurrency=20)
    async def send(job): ...
    """
    from .types import WorkerOptions, from_mapping

    from_mapping(WorkerOptions, options)  # unknown or invalid options fail at import time
    queues: tuple[str, ...]
    if queue is None:
        queues = ()
    elif isinstance(queue, str):
        queues = (queue,)
    else:
        queues = tuple(queue)

    def wrap(fn: Callable[..., Any]) -> ProcessorSpec:
        if not callable(fn):
            raise ValidationError("processor", f"{fn!r} is not callable")
        return ProcessorSpec(fn, queues, batch, dict(options))

    return wrap


def load_processor(target: str) -> ProcessorSpec:
    """Import `module:attr` (or `path/to/file.py:attr`) and return it as a ProcessorSpec.

    Raises ValidationError for a malformed target, a missing attribute or a non-callable;
    an import error propagates with its traceback.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValidationError("processor", f"expected MODULE:ATTR, got {target!r}")
    if module_name.endswith(".py") or os.sep in module_name:
        path = os.path.abspath(module_name)
        if not os.path.exists(path):
            raise ValidationError("processor", f"no such file: {module_name}")
        directory, filename = os.path.split(path)
        sys.path.insert(0, directory)
        module_name = filename.removesuffix(".py")
    elif "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: the working directory is importable
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValidationError(
                "processor", f"module {module_name!r} has no attribute {attr!r}"
            ) from None
    if isinstance(obj, ProcessorSpec):
        return obj
    if not callable(obj):
        raise ValidationError("processor", f"{target} is {type(obj).__name__}, not callable")
    return ProcessorSpec(obj)
