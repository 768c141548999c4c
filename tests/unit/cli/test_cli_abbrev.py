"""No CLI accepts an abbreviated flag: `--proc` is not `--procs`."""

from __future__ import annotations

import pytest

from glidemq.bench.cli import build_parser as bench_parser
from glidemq.chaos.cli import build_parser as chaos_parser
from glidemq.runtime.config import build_parser as run_parser


@pytest.mark.parametrize(
    ("parser", "argv"),
    [
        pytest.param(run_parser, ["app:f", "--proc", "2"], id="run-proc"),
        pytest.param(run_parser, ["app:f", "--conc", "2"], id="run-conc"),
        pytest.param(bench_parser, ["quick", "--rep", "1"], id="bench-rep"),
        pytest.param(bench_parser, ["gate", "--tol", "0.2"], id="bench-tol"),
        pytest.param(chaos_parser, ["all", "--sk", "x"], id="chaos-skip"),
    ],
)
def test_abbreviated_flags_are_refused(
    parser: object, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        parser().parse_args(argv)  # type: ignore[operator]
    assert info.value.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err


def test_full_flags_still_parse() -> None:
    assert run_parser().parse_args(["app:f", "--procs", "2"]).procs == 2
    assert bench_parser().parse_args(["quick", "--reps", "1"]).reps == 1
    assert chaos_parser().parse_args(["all", "--skip", "x"]).skip == ["x"]
