"""The IPC protocol without processes: frames, the error registry, SandboxJob's surface."""

from __future__ import annotations

import inspect
import traceback
from typing import Any

import pytest

import glidemq
from glidemq import BatchError, Job, JobNotFoundError, UnrecoverableError, ValidationError
from glidemq.process.frames import FrameDecoder, FrameError, encode_frame
from glidemq.sandbox import RemoteError, SandboxJob, register_error
from glidemq.sandbox.channel import MAX_FRAME
from glidemq.sandbox.errors import RemoteTraceback, describe_exit
from glidemq.sandbox.protocol import ProtocolError, error_from_wire, error_to_wire


def _roundtrip(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as raised:
        return error_from_wire(error_to_wire(raised))


def test_frames_survive_any_split() -> None:
    frames = encode_frame([{"t": "run", "i": 1}], MAX_FRAME) + encode_frame(
        [{"t": "x"}, {"t": "y"}], MAX_FRAME
    )
    for cut in range(len(frames)):
        decoder = FrameDecoder(MAX_FRAME)
        got = decoder.feed(frames[:cut]) + decoder.feed(frames[cut:])
        assert got == [{"t": "run", "i": 1}, {"t": "x"}, {"t": "y"}]


def test_bad_frames_are_frame_errors() -> None:
    with pytest.raises(FrameError):
        FrameDecoder(MAX_FRAME).feed(b"\xff\xff\xff\xff")
    with pytest.raises(FrameError):
        FrameDecoder(MAX_FRAME).feed(b"\x00\x00\x00\x03abc")
    with pytest.raises(FrameError):
        FrameDecoder(MAX_FRAME).feed(b"\x00\x00\x00\x02{}")  # not an array of messages


def test_known_errors_are_rebuilt_with_message_details_and_traceback() -> None:
    err = _roundtrip(ValueError("bad"))
    assert type(err) is ValueError and str(err) == "bad"
    assert isinstance(err.__cause__, RemoteTraceback) and "ValueError: bad" in str(err.__cause__)
    assert "ValueError: bad" in "".join(traceback.format_exception(err))
    key = _roundtrip(KeyError("k"))
    assert type(key) is KeyError and str(key) == "'k'"
    nf = _roundtrip(JobNotFoundError("q", "7"))
    assert isinstance(nf, JobNotFoundError) and nf.job_id == "7" and nf.queue == "q"
    v = _roundtrip(ValidationError("progress", "must be a number"))
    assert isinstance(v, ValidationError) and v.field == "progress"
    assert isinstance(_roundtrip(UnrecoverableError("stop")), UnrecoverableError)
    batch = _roundtrip(BatchError([1, ValueError("two")]))
    assert isinstance(batch, BatchError) and batch.results[0] == 1
    assert isinstance(batch.results[1], ValueError) and str(batch.results[1]) == "two"


def test_a_child_cannot_make_the_parent_raise_an_arbitrary_class() -> None:
    class Secret(Exception):
        pass

    for forged in ("os.system", "builtins.SystemExit", "subprocess.Popen", Secret.__qualname__):
        err = error_from_wire({"type": forged, "name": "X", "message": "m", "args": ["rm -rf"]})
        assert type(err) is RemoteError and err.type_name == forged and str(err) == "m"
    assert type(error_from_wire("garbage")) is ProtocolError
    err = _roundtrip(Secret("hidden"))
    assert type(err) is RemoteError and err.type_name.endswith("Secret")


def test_registered_types_cross_as_themselves() -> None:
    class Registered(Exception):
        def __init__(self, code: int) -> None:
            super().__init__(f"code {code}")

    register_error(Registered)
    err = _roundtrip(Registered(5))
    assert type(err) is Registered and str(err) == "code 5"
    with pytest.raises(TypeError):
        register_error(int)  # type: ignore[arg-type]


def test_sandbox_job_overrides_every_server_method_of_job() -> None:
    local = {"discarded", "ctx_name", "queue_name"}
    for name, member in inspect.getmembers(Job):
        if name.startswith("_") or name in local:
            continue
        if inspect.iscoroutinefunction(member) and name not in (
            "is_completed",
            "is_failed",
            "is_delayed",
            "is_active",
            "is_waiting",
            "is_waiting_children",
            "wait_until_finished",  # built on get_state/refresh, which are proxied
        ):
            assert getattr(SandboxJob, name) is not member, f"SandboxJob.{name} not proxied"


def test_sandbox_job_has_the_fields_of_the_job() -> None:
    class Nothing:
        async def call(self, handle: int, method: str, args: list[Any]) -> Any:
            return None

        def notify(self, handle: int, method: str, args: list[Any]) -> None:
            pass

    job: SandboxJob[Any, Any] = SandboxJob(
        {"h": 1, "id": "9", "name": "n", "data": [1], "opts": {"attempts": 2}, "queue": "q"},
        Nothing(),
    )
    assert isinstance(job, Job) and job.id == "9" and job.data == [1] and job.queue_name == "q"
    assert job.opts == {"attempts": 2} and "SandboxJob q:9" in repr(job)


def test_exit_descriptions() -> None:
    assert describe_exit(3) == "exited with code 3"
    assert describe_exit(-9) == "was killed by signal SIGKILL (9)"
    assert describe_exit(None) == "exited (status unknown)"


def test_sandbox_options_are_exported() -> None:
    assert glidemq.WorkerOptions().sandbox is None
