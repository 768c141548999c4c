"""How the supervisor words a worker process's death for the jobs it was running."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from glidemq.runtime.deaths import DeathCauses, oom_counter_file


def _status_of(code: str) -> int:
    """The wait status of a real child that ran `code`."""
    proc = subprocess.Popen([sys.executable, "-c", code])
    _, status = os.waitpid(proc.pid, 0)
    return status


def test_a_signal_and_an_exit_code_are_named() -> None:
    causes = DeathCauses(find=False)
    killed = _status_of("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert causes.cause(killed) == "worker process killed by SIGKILL while running"
    crashed = _status_of("import sys; sys.exit(3)")
    assert causes.cause(crashed) == "worker process exited with code 3 while running"
    assert causes.cause(_status_of("pass")) == ""


def test_a_sigkill_while_the_oom_kill_count_grew_is_the_oom_killer(tmp_path: Path) -> None:
    counter = tmp_path / "memory.events"
    counter.write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 4\n")
    causes = DeathCauses(counter)
    killed = _status_of("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert causes.cause(killed) == "worker process killed by SIGKILL while running"
    counter.write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 5\n")
    assert causes.cause(killed) == (
        "worker process killed by SIGKILL (the kernel's OOM killer) while running"
    )
    assert causes.cause(killed) == "worker process killed by SIGKILL while running"


def test_the_counter_file_is_found_for_cgroup_v1_and_v2(tmp_path: Path) -> None:
    found = oom_counter_file()
    assert found is None or found.name in ("memory.events", "memory.oom_control")
    missing = tmp_path / "no-such-cgroup-file"
    assert oom_counter_file(str(missing)) is None
