"""Regenerate the dashboard screenshots of docs/DASHBOARD.md from the browser tests.

    .venv/bin/python tools/dashboard_screenshots.py      # needs chromium + chromium-driver

Runs tests/dashboard/test_browser.py with GLIDEMQ_SCREENSHOTS pointing at a scratch
directory (the tests save a screenshot at each step, desktop at 1360 px and narrow at
400 px), then copies the ones the docs show into docs/img. Exits non-zero, copying nothing,
when the tests fail or skip (no browser here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMG = ROOT / "docs" / "img"
# screenshot the tests save -> the name docs/DASHBOARD.md uses
WANTED = {
    "queue-failed.png": "dashboard-queue.png",
    "job-retried.png": "dashboard-job.png",
    "narrow-overview.png": "dashboard-narrow-overview.png",
    "narrow-queue.png": "dashboard-narrow-queue.png",
    "narrow-job.png": "dashboard-narrow-job.png",
}


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="glidemq-shots-") as scratch:
        env = {**os.environ, "GLIDEMQ_SCREENSHOTS": scratch}
        cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "tests/dashboard/test_browser.py"]
        print("running the browser tests ...", flush=True)
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0 or " skipped" in done.stdout:
            print(done.stdout[-3000:], done.stderr[-2000:], sep="\n", file=sys.stderr)
            print("no screenshots copied: the browser tests did not all pass", file=sys.stderr)
            return 1
        missing = [name for name in WANTED if not (Path(scratch) / name).exists()]
        if missing:
            print(f"the tests saved no {', '.join(missing)}", file=sys.stderr)
            return 1
        for saved, name in WANTED.items():
            shutil.copyfile(Path(scratch) / saved, IMG / name)
            print(f"docs/img/{name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
