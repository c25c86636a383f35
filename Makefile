# Two commands do everything on a fresh machine: `make demo` and `make test`.
# The interpreter: PYTHON=... where given, else the first supported one on the PATH. sparkcap
# supports CPython 3.11 (every patch release, Debian 12's 3.11.2 included), 3.12 and 3.13.
SUPPORTED_PYTHONS := python3.11 python3.12 python3.13
PYTHON ?= $(firstword $(foreach p,$(SUPPORTED_PYTHONS),$(shell $(p) -c '' >/dev/null 2>&1 && command -v $(p))))
# A second supported Python for the quick (unit) tests beside the suite, so CI proves more than
# one version: 3.12 first, what DGX OS (the study's hardware) runs, then 3.13, then 3.11, never
# PYTHON's own; on the PATH or under pyenv. None found: make test says so and runs the suite on
# PYTHON alone.
PYENV_VERSIONS := $(or $(PYENV_ROOT),$(HOME)/.pyenv)/versions
PYTHON_MINOR := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
find_python = $(firstword $(shell python$(1) -c '' >/dev/null 2>&1 && command -v python$(1)) $(lastword $(sort $(wildcard $(PYENV_VERSIONS)/$(1).*/bin/python$(1)))))
OTHER_PYTHON ?= $(firstword $(foreach v,$(filter-out $(PYTHON_MINOR),3.12 3.13 3.11),$(call find_python,$(v))))
OTHER_VENV := .venv-other
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
export SPARKCAP_HOME ?= $(CURDIR)/.sparkcap
export PREFECT_HOME ?= $(CURDIR)/.sparkcap/prefect
export DO_NOT_TRACK := 1
export GX_ANALYTICS_ENABLED := False

.PHONY: venv demo test test-fast other-python-tests lint fmt typecheck bench local-server docs docs-reference clean

$(STAMP): pyproject.toml
	@[ -n "$(PYTHON)" ] || { echo "error: no Python 3.11, 3.12 or 3.13 on the PATH: install one (Debian 12: apt-get install python3.11-venv) or run make PYTHON=/path/to/python3.x"; exit 1; }
	@$(PYTHON) -c 'import sys, venv; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))' 2>/dev/null || { echo "error: $(PYTHON) is not a Python 3.11, 3.12 or 3.13 with venv: install one (Debian 12: apt-get install python3.11-venv) or run make PYTHON=/path/to/python3.x"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	@mkdir -p "$(PREFECT_HOME)"
	$(VENV)/bin/sparkcap demo

# pytest-xdist workers for the tests in parallel. Most of those tests wait on simulated streams
# that decode at the study's rates (the machine sat ~40 % idle under 2 workers), so a third
# worker overlaps waiting with work; more only share the 2 cores' CPU.
TEST_WORKERS ?= 3
# The client-timing tests and the twin night run at this niceness, beside the rest: they are
# mostly waiting, and what they measure is the client's own timing, so they get a core first
# when they wake. Waking first is not enough: a burst of work (a wave's chunks) is cut into
# slices shared with every busy task, and beside 8 busy processes on 2 cores a 4 ms burst took
# 4 + 5.9 ms (p50), + 15 ms (p99), + 18 ms (max) at niceness -5; + 0, + 4.3, + 5.3 ms at -15
# (benchmarks/slice_latency.py, 2026-12-05): at -5 fresh clones' parallel phase put 1-2 % into
# a 2 s stream's rate. Raising priority needs root (CI); elsewhere nice says so and runs at 0.
TIMING_NICE ?= -15
LOGS := $(SPARKCAP_HOME)/test-logs

# make test: everything starts at once, because most of the suite waits rather than computes:
#   - the llama-server cold path (download, digest, configure; the compile, ~9 min on 2 cores
#     beside the rest, only where the build cache lacks this key), in the background, then the
#     real-server tests (-m real_server) on 2 workers of their own: run as soon as the build
#     is done, not queued in the parallel run, where a group waits behind the last tests of the
#     worker that took it (pytest-xdist hands a worker its next group before its last test);
#   - the twin night (tests/twin.py, ~5 min, mostly simulated decoding) that every mart,
#     report and terminal test reads, built ahead of them;
#   - the tests that hold the client's own timing to a tolerance (-m client_timing), one at a
#     time, at TIMING_NICE;
#   - the lint step (ruff, mypy, lint-imports, the docs check);
#   - pytest on TEST_WORKERS workers over everything else.
# Each background part writes a log under $(LOGS), printed as it ends; make test fails if any
# part failed, and ends with the phase times and the number of dbt builds and GX validations
# (each notes itself in SPARKCAP_BUILD_LOG, from any process).
test: $(STAMP)
	@mkdir -p "$(PREFECT_HOME)" "$(SPARKCAP_HOME)" "$(LOGS)"
	@rm -f "$(LOGS)"/*.rc "$(LOGS)"/*.log "$(LOGS)"/*.cpu "$(SPARKCAP_HOME)/llama-build.rc"
	@rm -rf "$(SPARKCAP_HOME)/twin"
	@export SPARKCAP_BUILD_LOG="$(SPARKCAP_HOME)/builds.jsonl"; rm -f "$$SPARKCAP_BUILD_LOG"; \
	  export SPARKCAP_TEST_TWIN_DIR="$(SPARKCAP_HOME)/twin"; \
	  t0=$$(date +%s); \
	  echo "llama-server in the background (log: $(SPARKCAP_HOME)/llama-build.log)"; \
	  ( $(PY) -m sparkcap.servers.llama --check-cold > "$(SPARKCAP_HOME)/llama-build.log" 2>&1; \
	    brc=$$?; echo $$brc > "$(SPARKCAP_HOME)/llama-build.rc"; \
	    if [ $$brc -eq 0 ]; then PREFECT_HOME="$(PREFECT_HOME)/real-server" \
	      $(PY) -m pytest -q -p no:cacheprovider --durations=10 -n 2 --dist loadgroup \
	      -m "real_server and not client_timing" > "$(LOGS)/real-server.log" 2>&1; \
	      echo $$? > "$(LOGS)/real-server.rc"; \
	    else echo "not run: the llama-server build failed" > "$(LOGS)/real-server.log"; \
	      echo 1 > "$(LOGS)/real-server.rc"; fi; \
	    times > "$(LOGS)/real-server.cpu"; \
	    echo $$(( $$(date +%s) - t0 )) > "$(LOGS)/real-server.s" ) & \
	  echo "twin night, client-timing tests and lint in the background (logs: $(LOGS))"; \
	  ( PREFECT_HOME="$(PREFECT_HOME)/twin" nice -n $(TIMING_NICE) \
	      $(PY) -m tests.twin "$$SPARKCAP_TEST_TWIN_DIR" \
	      > "$(LOGS)/twin.log" 2>&1; echo $$? > "$(LOGS)/twin.rc"; times > "$(LOGS)/twin.cpu" ) & \
	  ( PREFECT_HOME="$(PREFECT_HOME)/timing" nice -n $(TIMING_NICE) \
	      $(PY) -m pytest -q -p no:cacheprovider --durations=10 \
	      -m client_timing > "$(LOGS)/timing.log" 2>&1; echo $$? > "$(LOGS)/timing.rc"; \
	    times > "$(LOGS)/timing.cpu"; echo $$(( $$(date +%s) - t0 )) > "$(LOGS)/timing.s" ) & \
	  ( if [ -n "$(OTHER_PYTHON)" ]; then \
	      PREFECT_HOME="$(PREFECT_HOME)/other-python" $(MAKE) --no-print-directory \
	      other-python-tests > "$(LOGS)/other-python.log" 2>&1; \
	      echo $$? > "$(LOGS)/other-python.rc"; \
	    else echo "no second supported Python found: the suite ran on $(PYTHON) only" \
	      > "$(LOGS)/other-python.log"; echo 0 > "$(LOGS)/other-python.rc"; fi; \
	    times > "$(LOGS)/other-python.cpu"; \
	    echo $$(( $$(date +%s) - t0 )) > "$(LOGS)/other-python.s" ) & \
	  ( ( set -e; $(VENV)/bin/ruff check sparkcap flows tests benchmarks; \
	    $(VENV)/bin/ruff format --check sparkcap flows tests benchmarks; \
	    $(VENV)/bin/mypy; $(VENV)/bin/lint-imports --no-cache; \
	    $(PY) -m sparkcap.docs_reference --check ) > "$(LOGS)/lint.log" 2>&1; \
	    echo $$? > "$(LOGS)/lint.rc"; times > "$(LOGS)/lint.cpu"; \
	    echo $$(( $$(date +%s) - t0 )) > "$(LOGS)/lint.s" ) & \
	  ( $(PY) -m pytest -q -p no:cacheprovider --durations=30 -n $(TEST_WORKERS) --dist loadgroup \
	    -m "not client_timing and not real_server"; echo $$? > "$(LOGS)/parallel.rc"; \
	    times > "$(LOGS)/parallel.cpu" ); rc=$$(cat "$(LOGS)/parallel.rc" 2>/dev/null || echo 1); \
	  t2=$$(date +%s); \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; rc=1; fi; \
	  wait; t3=$$(date +%s); \
	  echo "── lint ──"; cat "$(LOGS)/lint.log"; \
	  echo "── client-timing tests (alongside, at niceness $(TIMING_NICE)) ──"; \
	  tail -25 "$(LOGS)/timing.log"; \
	  if [ "$$(cat "$(LOGS)/twin.rc")" != 0 ]; then echo "the twin night failed:"; \
	    tail -20 "$(LOGS)/twin.log"; rc=1; fi; \
	  grep "^llama-server:" "$(SPARKCAP_HOME)/llama-build.log"; \
	  if [ "$$(cat "$(SPARKCAP_HOME)/llama-build.rc" 2>/dev/null)" != 0 ]; then \
	    echo "llama-server's cold path failed:"; tail -5 "$(SPARKCAP_HOME)/llama-build.log"; rc=1; fi; \
	  echo "── real-server tests (after the llama-server build, on 2 workers) ──"; \
	  tail -15 "$(LOGS)/real-server.log"; \
	  echo "── unit tests on a second Python ($(or $(OTHER_PYTHON),none)), $$(cat "$(LOGS)/other-python.s") s from the start ──"; \
	  tail -3 "$(LOGS)/other-python.log"; \
	  $(PY) tests/suite_summary.py "$$SPARKCAP_BUILD_LOG" "$$(cat "$(LOGS)/lint.s" || echo -1)" \
	    $$((t2 - t0)) "$$(cat "$(LOGS)/timing.s" || echo -1)" \
	    "$$(cat "$(LOGS)/real-server.s" || echo -1)" $$((t3 - t0)) "$(LOGS)"; \
	  if [ "$$(cat "$(LOGS)/lint.rc")" != 0 ]; then echo "make test: the lint step failed"; rc=1; fi; \
	  timing_rc=$$(cat "$(LOGS)/timing.rc"); \
	  if [ "$$timing_rc" = 5 ]; then echo "pytest collected no client-timing tests"; rc=1; \
	  elif [ "$$timing_rc" != 0 ]; then echo "make test: client-timing tests failed"; rc=1; fi; \
	  if [ "$$(cat "$(LOGS)/other-python.rc")" != 0 ]; then \
	    echo "make test: the unit tests on $(OTHER_PYTHON) failed"; rc=1; fi; \
	  real_rc=$$(cat "$(LOGS)/real-server.rc"); \
	  if [ "$$real_rc" = 5 ]; then echo "pytest collected no real-server tests"; rc=1; \
	  elif [ "$$real_rc" != 0 ]; then echo "make test: real-server tests failed"; rc=1; fi; \
	  exit $$rc

# the unit tests on OTHER_PYTHON, in a venv of its own (make test runs this beside the suite)
other-python-tests:
	@[ -n "$(OTHER_PYTHON)" ] || { echo "error: no second supported Python found: give OTHER_PYTHON=/path/to/python3.x"; exit 1; }
	$(OTHER_PYTHON) -m venv $(OTHER_VENV)
	$(OTHER_VENV)/bin/python -m pip install -q --upgrade pip
	$(OTHER_VENV)/bin/python -m pip install -q -e '.[dev]'
	$(OTHER_VENV)/bin/python -m pytest -q -p no:cacheprovider -m unit

lint: $(STAMP)
	$(VENV)/bin/ruff check sparkcap flows tests benchmarks
	$(VENV)/bin/ruff format --check sparkcap flows tests benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m sparkcap.docs_reference --check

test-fast: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup \
	  -m "not slow and not e2e and not client_timing"

fmt: $(STAMP)
	$(VENV)/bin/ruff format sparkcap flows tests benchmarks
	$(VENV)/bin/ruff check --fix sparkcap flows tests benchmarks

bench: $(STAMP)
	$(PY) benchmarks/rate_accuracy.py
	$(PY) benchmarks/warehouse_build.py
	$(PY) benchmarks/validate_night.py

local-server: $(STAMP)
	$(VENV)/bin/sparkcap local-server

# The docs site, offline (no CDN, no web fonts): open site/index.html. --strict fails on a broken
# link or anchor and on a page missing from mkdocs.yml's nav.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# Rewrite the generated reference pages (CLI, raw schema, dbt models) from the code.
docs-reference: $(STAMP)
	$(PY) -m sparkcap.docs_reference

clean:
	rm -rf $(VENV) .sparkcap warehouse reports site
