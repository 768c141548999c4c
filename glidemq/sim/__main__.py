"""`python -m glidemq.sim`: see glidemq.sim.cli."""

from .cli import main

raise SystemExit(main())
