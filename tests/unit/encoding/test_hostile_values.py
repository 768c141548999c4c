"""Values that used to slip through: NaN and Infinity in streamed chunks and signal data
(stored as null, while job data refuses them), a suspend timeout of 0 (read as "forever"),
and dashboard refresh periods that stop the page or burn a core."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from glidemq import ValidationError
from glidemq.job.streams import encode_chunk
from glidemq.queue.suspend import check_suspend, encode_signal

NON_FINITE = [math.nan, math.inf, -math.inf, {"a": [1, math.nan]}, [math.inf]]


@pytest.mark.parametrize("value", NON_FINITE)
def test_a_stream_chunk_with_nan_or_infinity_is_refused(value: object) -> None:
    with pytest.raises(ValidationError, match="chunk"):
        encode_chunk(value)


@pytest.mark.parametrize("value", NON_FINITE)
def test_signal_data_with_nan_or_infinity_is_refused(value: object) -> None:
    with pytest.raises(ValidationError, match="data"):
        encode_signal("go", value)


def test_finite_chunks_and_nulls_still_pass() -> None:
    assert encode_chunk({"a": None, "b": 1.5}) == b'{"a":null,"b":1.5}'
    assert encode_signal("go", None) == b"null"


@pytest.mark.parametrize("timeout", [0, -1, 1.5, math.nan, True, "10"])
def test_a_suspend_timeout_outside_1_to_max_is_refused(timeout: object) -> None:
    with pytest.raises(ValidationError, match="timeout_ms"):
        check_suspend(None, timeout)


def test_no_suspend_timeout_means_no_deadline() -> None:
    assert check_suspend("why", None) == ("why", 0)
    assert check_suspend(None, 5) == ("", 5)


@pytest.mark.parametrize("refresh", [math.nan, math.inf, 1e-9, 0, -1, 3601])
def test_dashboard_refresh_outside_its_range_is_refused(refresh: float) -> None:
    from glidemq.dashboard import create_app

    with pytest.raises(ValidationError, match="refresh"):
        create_app("valkey://127.0.0.1:1", refresh=refresh)


@pytest.mark.parametrize("text", ["nan", "inf", "1e-9", "0"])
def test_the_dashboard_cli_refuses_a_bad_refresh_with_exit_2(text: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "glidemq.dashboard.cli", "--refresh", text, "--port", "1"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "--refresh" in done.stderr and "Traceback" not in done.stderr


def test_only_a_timed_out_connect_is_tried_again() -> None:
    from glidemq.client.connection import connect_timed_out

    assert connect_timed_out(RuntimeError("connection attempt timed out"))
    assert connect_timed_out(RuntimeError("Connection Timed Out after 250ms"))
    assert not connect_timed_out(RuntimeError("connection refused"))
    assert not connect_timed_out(RuntimeError("WRONGPASS invalid username-password pair"))
