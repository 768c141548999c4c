"""Old name of `glidemq.spark.report`, kept so `python -m glidemq.spark.pipeline` (documented
before) still works; it says so on stderr."""

from __future__ import annotations

import sys

from .report import main

if __name__ == "__main__":
    print("python -m glidemq.spark.pipeline is now python -m glidemq.spark.report", file=sys.stderr)
    sys.exit(main())
