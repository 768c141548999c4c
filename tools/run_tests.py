"""Run the test suite; an empty collection is reported as the failure it is.

pytest exits 5 when it collected no tests. For this project that always means something is
broken (a bad path, a filter that matches nothing), so it must not read as success.
"""

from __future__ import annotations

import subprocess
import sys

NO_TESTS_COLLECTED = 5


def main() -> int:
    cmd = [sys.executable, "-m", "pytest", *sys.argv[1:]]
    code = subprocess.call(cmd)
    if code == NO_TESTS_COLLECTED:
        print(
            "run_tests: pytest collected no tests (exit 5). The suite is never empty, so this "
            "is a failure: check the paths or -k/-m filters passed.",
            file=sys.stderr,
        )
        return 1
    return code


if __name__ == "__main__":
    raise SystemExit(main())
