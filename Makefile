# The two set-up commands of the README. Each installs what it needs into .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint bench proto clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	# torch first, pinned: on these machines 2.13.0 is a local CPU build (any other pulls GBs).
	$(VENV)/bin/pip install -q torch==2.13.0
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $(STAMP)

# diag's operator observer for this torch (diag.hook.opstats: C++, ~10 s of g++ once; without a
# compiler the profiler windows use Kineto and this says why)
OBSERVER := $(PY) -m diag.hook.opstats build || true

demo: $(STAMP)
	$(OBSERVER)
	$(VENV)/bin/diag demo

test: $(STAMP) lint
	# byte-compiled once: where PYTHONDONTWRITEBYTECODE is set (these machines), every process the
	# tests start (ranks' hooks, daemons, analyzers, CLIs: hundreds) would compile diag again
	$(PY) -m compileall -q diag probes tests bench scripts > /dev/null
	$(OBSERVER)
	# the unit tests on two workers (pure logic: no process, no job); the integration tests one at
	# a time, as each starts real jobs whose timing a second worker would disturb
	$(PY) -m pytest -q -n 2 -m "not integration"
	$(PY) -m pytest -q -m integration

lint: $(STAMP)
	$(VENV)/bin/ruff check diag probes tests bench scripts
	$(VENV)/bin/ruff format --check diag probes tests bench scripts
	$(VENV)/bin/mypy
	# the architecture: layers, the hook's and daemon's closures, no cycles (pyproject.toml)
	$(VENV)/bin/lint-imports --no-cache

bench: $(STAMP)
	$(PY) bench/overhead.py

proto: $(STAMP)
	$(PY) scripts/gen_proto.py

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
