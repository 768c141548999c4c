"""`glidemq-bench report` says where the report and its plots were written."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from glidemq.bench.cli import main

RESULTS = Path(__file__).parents[1] / "spark" / "data" / "results"


def test_the_plain_report_says_where_it_went_and_that_it_has_no_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(RESULTS / "records-a.jsonl", results)
    out = tmp_path / "plain"
    assert main(["report", str(results), "--output", str(out), "--plain"]) == 0
    err = capsys.readouterr().err
    assert f"report written to {out / 'report.md'}" in err
    assert "plots: none" in err


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)  # a cold Spark start on a busy machine
def test_the_spark_report_lists_every_plot_it_wrote(tmp_path: Path) -> None:
    if shutil.which("java") is None:
        pytest.skip("no java on PATH: the Spark report needs Java 17")
    out = tmp_path / "report"
    # The real command in its own process: a Spark session started here would stay the
    # process's session, and the Spark tests need theirs (local[2,3], task retries).
    argv = [sys.executable, "-m", "glidemq.bench.cli", "report", str(RESULTS), "--output", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=580, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    err = done.stderr
    plots = sorted((out / "plots").glob("*.png"))
    assert plots
    assert f"plots ({len(plots)}): {out / 'plots'}" in err
    for png in plots:
        assert f"\n  {png}" in err
