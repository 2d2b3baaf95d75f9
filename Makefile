# Every target sets up what it needs by itself: a pinned uv in .tools/, then the locked
# environment in .venv/ (re-synced only when pyproject.toml or uv.lock changed).
SHELL := /bin/bash
PYTHON ?= python3
UV_VERSION := 0.13.8
UV := .tools/bin/uv
VENV := .venv
PY := $(VENV)/bin/python
export UV_PYTHON_DOWNLOADS := never
export UV_PYTHON := $(PYTHON)
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: setup postgres-binaries run test lint bench clean

setup: $(VENV)/.synced postgres-binaries

# The session-store tests start their own PostgreSQL server (tests/sessions/pg_server.py) from the
# machine's binaries; where there are none, Debian's package provides them (root only).
postgres-binaries:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; } || \
	  echo "note: no PostgreSQL server binaries; the PostgreSQL session tests will be skipped" >&2

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

$(VENV)/.synced: pyproject.toml uv.lock | $(UV)
	$(UV) sync --frozen --all-extras --quiet
	touch $@

run: setup  ## the demo agent session (offline; HARNESS_MODEL=... for a real provider)
	$(PY) -m harness run

test: setup  ## the whole test suite
	$(PY) -m pytest -q -n 2 --dist loadgroup  # one worker runs the litellm proxy tests

lint: setup  ## ruff and mypy --strict
	$(VENV)/bin/ruff check harness middleware providers tests benchmarks examples
	$(VENV)/bin/ruff format --check harness middleware providers tests benchmarks examples
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy examples

bench: setup  ## the benchmark suite; writes benchmarks/results/
	$(PY) -m benchmarks

clean:
	rm -rf .tools $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
