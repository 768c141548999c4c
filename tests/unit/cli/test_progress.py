"""The progress line of long commands: step k of n, elapsed and time left on a terminal;
nothing but the result lines elsewhere (CI logs)."""

from __future__ import annotations

import io

from glidemq.cli.progress import Progress, format_duration


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _last_line(text: str) -> str:
    return text.split("\r")[-1].rstrip()


def test_on_a_terminal_the_line_shows_step_elapsed_and_time_left() -> None:
    clock, out = Clock(), Terminal()
    progress = Progress(4, name="glidemq-bench", stream=out, clock=clock, refresh=3600)
    assert progress.enabled  # a terminal: drawn without being asked
    progress.start("process c=100 glidemq")
    assert _last_line(out.getvalue()) == (
        "glidemq-bench: [1/4] process c=100 glidemq, elapsed 0s, estimating"
    )
    clock.now += 30
    progress.done()
    progress.note("[1/4] process c=100 glidemq: 12,345 jobs/s")
    progress.start("process c=100 bullmq")
    assert _last_line(out.getvalue()) == (
        "glidemq-bench: [2/4] process c=100 bullmq, elapsed 30s, about 1m30s left"
    )
    assert "\r[1/4] process c=100 glidemq: 12,345 jobs/s\n" in out.getvalue()
    progress.close()
    assert out.getvalue().endswith("\r")  # the line is erased at the end
    assert _last_line(out.getvalue()) == ""


def test_elsewhere_only_the_result_lines_are_printed() -> None:
    out = io.StringIO()  # not a terminal, like a CI log
    with Progress(2, name="glidemq-bench", stream=out) as progress:
        assert not progress.enabled
        progress.start("add-bulk glidemq")
        progress.done()
        progress.note("[1/2] add-bulk glidemq: 8,000 jobs/s")
        progress.start("add-bulk bullmq")
        progress.done()
    assert out.getvalue() == "[1/2] add-bulk glidemq: 8,000 jobs/s\n"


def test_a_step_that_ends_without_done_still_counts() -> None:
    clock = Clock()
    progress = Progress(3, stream=io.StringIO(), enabled=False, clock=clock)
    progress.start("a")
    clock.now += 10
    progress.start("b")
    assert (progress.finished, progress.current) == (1, 2)
    assert progress.estimate() == 20.0


def test_durations_read_well() -> None:
    assert [format_duration(s) for s in (0, 42.9, 185, 3725)] == ["0s", "42s", "3m05s", "1h02m"]


def test_progress_counted_in_units_estimates_from_the_rate_so_far() -> None:
    # how glidemq-chaos soak shows jobs done of all on a terminal
    clock, out = Clock(), Terminal()
    progress = Progress(1000, name="glidemq-chaos soak", stream=out, clock=clock, refresh=3600)
    clock.now += 60
    progress.update(250, "250/1,000 done")
    assert _last_line(out.getvalue()) == (
        "glidemq-chaos soak: [250/1000] 250/1,000 done, elapsed 1m00s, about 3m00s left"
    )
    progress.update(5000, "overshoot")  # never past the total
    assert progress.finished == 1000 and progress.estimate() == 0
    progress.close()
    assert _last_line(out.getvalue()) == ""


def test_progress_in_units_draws_nothing_off_a_terminal() -> None:
    out = io.StringIO()
    progress = Progress(10, stream=out)
    progress.update(3, "3/10 done")
    progress.close()
    assert out.getvalue() == ""
