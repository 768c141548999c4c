"""The process plumbing shared by glidemq-run and the sandbox: one frame codec (strict and
lenient), the child set-up helper, the loop factory and the RSS reader, on real processes."""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

import pytest

from glidemq.process.frames import FrameDecoder, FrameError, encode_frame, read_frame
from glidemq.process.loop import loop_factory
from glidemq.process.memory import rss_bytes, vm_bytes
from glidemq.process.setup import run_as_child
from glidemq.runtime import ipc

LIMIT = 1 << 16


def test_a_frame_holds_an_array_of_objects_and_survives_any_split() -> None:
    data = encode_frame([{"a": 1}], LIMIT) + encode_frame([{"b": 2}, {"c": 3}], LIMIT)
    for cut in range(len(data) + 1):
        decoder = FrameDecoder(LIMIT)
        got = decoder.feed(data[:cut]) + decoder.feed(data[cut:])
        assert got == [{"a": 1}, {"b": 2}, {"c": 3}]


def test_encoding_over_the_limit_is_a_frame_error() -> None:
    with pytest.raises(FrameError, match="over the 16 limit"):
        encode_frame([{"x": "y" * 32}], 16)


def test_strict_decoder_raises_on_a_bad_frame() -> None:
    with pytest.raises(FrameError, match="over the"):
        FrameDecoder(LIMIT).feed((LIMIT + 1).to_bytes(4, "big"))
    with pytest.raises(FrameError, match="undecodable"):
        FrameDecoder(LIMIT).feed(b"\x00\x00\x00\x03abc")
    with pytest.raises(FrameError, match="array of objects"):
        FrameDecoder(LIMIT).feed(b"\x00\x00\x00\x02{}")


def test_lenient_decoder_skips_a_bad_frame_and_keeps_reading() -> None:
    decoder = FrameDecoder(LIMIT, strict=False)
    good = encode_frame([{"type": "heartbeat"}], LIMIT)
    got = decoder.feed(good + b"\x00\x00\x00\x03abc" + b"\x00\x00\x00\x01" + b"7" + good)
    assert got == [{"type": "heartbeat"}, {"type": "heartbeat"}]
    assert len(decoder.invalid) == 2
    assert "undecodable" in decoder.invalid[0]
    assert "array of objects" in decoder.invalid[1]


def test_lenient_decoder_drops_what_it_holds_after_an_oversized_length() -> None:
    decoder = FrameDecoder(LIMIT, strict=False)
    good = encode_frame([{"n": 1}], LIMIT)
    assert decoder.feed(good + (LIMIT + 1).to_bytes(4, "big") + good) == [{"n": 1}]
    assert decoder.invalid and "over the" in decoder.invalid[0]
    assert decoder.feed(good) == [{"n": 1}]  # what comes next is read again


def test_read_frame_takes_one_frame_and_leaves_the_next() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(encode_frame([{"first": 1}], LIMIT) + encode_frame([{"second": 2}], LIMIT))
        assert read_frame(b, LIMIT) == [{"first": 1}]
        assert read_frame(b, LIMIT) == [{"second": 2}]
        a.sendall((LIMIT + 1).to_bytes(4, "big"))
        with pytest.raises(FrameError):
            read_frame(b, LIMIT)
        a.close()
        with pytest.raises(EOFError):
            read_frame(b, LIMIT)


def test_supervisor_pipe_messages_round_trip_through_the_codec() -> None:
    r, w = os.pipe()
    try:
        ipc.write_frame(w, {"type": ipc.HEARTBEAT, "completed": 3})
        reader = ipc.new_reader()
        assert reader.feed(os.read(r, 65536)) == [{"type": ipc.HEARTBEAT, "completed": 3}]
        assert reader.strict is False
    finally:
        os.close(r)
        os.close(w)


def test_loop_factory_gives_uvloop() -> None:
    factory = loop_factory()
    assert factory is not None
    loop = factory()
    try:
        assert type(loop).__module__.startswith("uvloop")
    finally:
        loop.close()


def _statm_rss() -> int:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc: Linux only")
def test_rss_reader_reads_this_process_and_a_forked_child_reads_its_own() -> None:
    assert abs(rss_bytes() - _statm_rss()) < 64 << 20
    assert vm_bytes() > rss_bytes() > 0
    rss_bytes()  # the statm descriptor is open now; a child must not read the parent's
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        before = rss_bytes()
        ballast = bytearray(256 << 20)  # touched: 256 MiB more resident in the child only
        for i in range(0, len(ballast), 4096):
            ballast[i] = 1
        os.write(w, f"{before} {rss_bytes()}".encode())
        os._exit(0)
    os.close(w)
    try:
        before, after = map(int, os.read(r, 64).split())
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    # Read from the parent's statm, the child would not see its own ballast. (Not compared
    # with the parent's figure: a forked child maps only part of its parent's pages.)
    assert after - before > 200 << 20


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def _fork_child(**kwargs: object) -> tuple[int, int]:
    """Fork a process running `run_as_child(**kwargs)`; its pid and exit code."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        run_as_child(**kwargs)  # type: ignore[arg-type]
    _, status = os.waitpid(pid, 0)
    return pid, os.waitstatus_to_exitcode(status)


def test_run_as_child_exits_with_the_body_code_and_resets_signals() -> None:
    r, w = os.pipe()
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    try:

        def body() -> int:
            report = (
                signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
                signal.getsignal(signal.SIGINT) == signal.SIG_IGN,
                signal.SIGUSR1 not in signal.pthread_sigmask(signal.SIG_BLOCK, set()),
                os.getpgid(0) == os.getpid(),
                _closed(keep),
            )
            os.write(w, repr(report).encode())
            return 7

        keep = os.dup(r)
        _, code = _fork_child(body=body, error_code=70, close=[keep], new_group=True)
        assert code == 7
        assert os.read(r, 200) == b"(True, True, True, True, True)"
        os.close(keep)
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        os.close(r)
        os.close(w)


def test_run_as_child_prints_an_escaping_error_and_exits_with_error_code(
    capfd: pytest.CaptureFixture[str],
) -> None:
    def body() -> int:
        raise RuntimeError("boom in the child")

    _, code = _fork_child(body=body, error_code=70)
    assert code == 70
    assert "RuntimeError: boom in the child" in capfd.readouterr().err


def test_run_as_child_exits_0_without_running_when_its_parent_is_gone() -> None:
    # pid 1 is not our parent: as if ours had died before the child was set up
    _, code = _fork_child(body=lambda: 5, error_code=70, parent_pid=1)
    assert code == 0  # 5 had the body run
