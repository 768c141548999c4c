"""The simulator itself: 200 seeds hold every invariant (what `make test` runs), a seed's
history is the same on every run and in every process, the command line says what broke,
and a failing seed shrinks to a test that still fails."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from glidemq.processor import load_processor
from glidemq.sim import make_plan, run_plan
from glidemq.sim.checker import INVARIANTS
from glidemq.sim.cli import main, run_many
from glidemq.sim.known import KNOWN
from glidemq.sim.revert import DEFAULT_BUDGET, hunt
from glidemq.sim.shrink import reproducer, shrink
from tests.sim.reverts import REVERTS

_FIVE = REVERTS[0]  # 5dc2e01: found in the first seeds, so the tests below stay short


def _first_failing_seed() -> int:
    with _FIVE.applied():
        found = hunt(_FIVE.invariant, range(50), procs=1)
    assert found is not None
    return found.seed


@pytest.mark.slow
@pytest.mark.timeout(900)  # a hang guard: 200 seeds take 1-2 min, longer on a loaded machine
def test_the_default_budget_of_seeds_breaks_no_invariant() -> None:
    summaries = list(run_many(range(DEFAULT_BUDGET)))
    assert len(summaries) == DEFAULT_BUDGET
    broken = [v.line(s.seed) for s in summaries for v in s.failures]
    assert not broken, "\n".join(broken)
    assert all(s.jobs >= 50 and s.faults >= 3 for s in summaries)


def test_a_seed_gives_the_same_history_on_every_run() -> None:
    first = run_plan(make_plan(7))
    again = run_plan(make_plan(7))
    assert first.history.lines() == again.history.lines()
    assert first.digest() == again.digest()
    assert run_plan(make_plan(8)).digest() != first.digest()


def _digest(seed: int, hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    out = subprocess.run(
        [sys.executable, "-m", "glidemq.sim", "run", "--seed", str(seed), "--digest"],
        capture_output=True, text=True, env=env, check=False, timeout=120,
    )  # fmt: skip
    return out.stdout.strip()


def test_a_seed_gives_the_same_digest_in_two_processes() -> None:
    here = run_plan(make_plan(11)).digest()
    assert _digest(11, "1") == _digest(11, "2") == here


def test_calls_failed_together_fail_in_the_same_order_in_every_process() -> None:
    # seed 130: a server restart fails several calls in flight at the same instant; they
    # failed in the order of their objects' memory addresses, which differs per process
    digests = {_digest(130, str(hash_seed)) for hash_seed in range(4)}
    assert len(digests) == 1, digests


def test_the_command_line_prints_failing_seeds_and_the_count(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "--seeds", "0-2", "--procs", "1"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "3 seeds, 0 violations"
    seed = _first_failing_seed()
    with _FIVE.applied():
        code = main(["run", "--seeds", str(seed), "--procs", "1"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 1 and out[-1] == "1 seeds, 1 violations"
    assert out[0].startswith(f"seed {seed}: ") and _FIVE.invariant in out[0]


def test_the_trace_is_readable(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--seed", "2", "--trace"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(" start " in line and " run=" in line for line in lines)
    assert any(" fault " in line and "kind=" in line for line in lines)


def test_a_failing_seed_shrinks_to_a_test_that_still_fails() -> None:
    seed = _first_failing_seed()
    with _FIVE.applied():
        plan = make_plan(seed)
        small = shrink(plan, _FIVE.invariant, max_runs=120)
        result = run_plan(small)
        assert _FIVE.invariant in {v.invariant for v in result.violations}
        assert len(small.jobs) < len(plan.jobs) and len(small.faults) <= len(plan.faults)
        code = reproducer(result, _FIVE.invariant)
        scope: dict[str, object] = {}
        exec(compile(code, "reproducer", "exec"), scope)
        test = next(v for k, v in scope.items() if k.startswith(f"test_sim_seed_{seed}_"))
        with pytest.raises(AssertionError):
            test()  # type: ignore[operator]
    test()  # type: ignore[operator]  # with the fix in place it passes


def test_every_known_defect_names_an_invariant() -> None:
    assert {k.invariant for k in KNOWN} <= set(INVARIANTS)


def test_plans_keep_their_shape() -> None:
    for seed in range(20):
        plan = make_plan(seed)
        assert len(plan.jobs) >= 50 and len(plan.faults) >= 3
        assert make_plan(seed) == plan
    assert make_plan(1, "none").faults == ()
    kinds = {f.kind for s in range(30) for f in make_plan(s, "crash,freeze").faults}
    assert kinds == {"crash", "freeze"}


@pytest.mark.parametrize("target", ["tests.sim.apps:process", "tests.sim.apps:process_sync"])
def test_a_users_processor_runs_through_the_same_faults(target: str) -> None:
    from tests.sim import apps

    apps.SEEN.clear()
    app = load_processor(target).function
    result = run_plan(make_plan(5), app)
    assert apps.SEEN, "the user's processor never ran"
    assert not result.failures, [v.line(5) for v in result.failures]
    assert any(r.kind == "fault" for r in result.history)


def test_the_command_line_takes_an_app(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--seeds", "1-2", "--procs", "1", "--app", "tests.sim.apps:process"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "2 seeds, 0 violations"


def test_every_invariant_is_documented() -> None:
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "SIMULATION.md").read_text(encoding="utf-8")
    for name in INVARIANTS:
        assert f"| `{name}` |" in text, f"docs/SIMULATION.md does not describe {name}"
