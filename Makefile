# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
export SPARKCAP_HOME ?= $(CURDIR)/.sparkcap
export PREFECT_HOME ?= $(CURDIR)/.sparkcap/prefect
export DO_NOT_TRACK := 1
export GX_ANALYTICS_ENABLED := False

.PHONY: venv demo test test-fast lint fmt typecheck bench local-server docs docs-reference clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (sparkcap needs Python 3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	@mkdir -p "$(PREFECT_HOME)"
	$(VENV)/bin/sparkcap demo

# pytest-xdist workers, one per core of the 2-core machines the budget is set on: the suite
# keeps both cores busy (the cold llama-server build beside it), and a third worker only
# made short waves share a core, fail the timing rule and be measured again
TEST_WORKERS ?= 2

test: $(STAMP)
	@mkdir -p "$(PREFECT_HOME)" "$(SPARKCAP_HOME)"
	@# llama-server starts now, beside the lint step and the tests that need none: the download,
	@# digest and configure steps every run; the compile (~4.5 min on 2 cores) only where the build
	@# cache lacks this key (a new machine). Not niced: the real-server tests wait on its lock.
	@echo "llama-server in the background (log: $(SPARKCAP_HOME)/llama-build.log)"
	@rm -f "$(SPARKCAP_HOME)/llama-build.rc"
	@( $(PY) -m sparkcap.servers.llama --check-cold > "$(SPARKCAP_HOME)/llama-build.log" 2>&1; \
	  echo $$? > "$(SPARKCAP_HOME)/llama-build.rc" ) &
	@date +%s > "$(SPARKCAP_HOME)/lint.started"
	$(VENV)/bin/ruff check sparkcap flows tests benchmarks
	$(VENV)/bin/ruff format --check sparkcap flows tests benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m sparkcap.docs_reference --check
	@# pytest exits 5 when it collects nothing: say so rather than fail or pass silently
	@# then the tests that hold the client's own timing to a tolerance, alone on the machine;
	@# every dbt invocation and GX validation of both notes itself in SPARKCAP_BUILD_LOG
	@export SPARKCAP_BUILD_LOG="$(SPARKCAP_HOME)/builds.jsonl"; rm -f "$$SPARKCAP_BUILD_LOG"; \
	  t1=$$(date +%s); lint_s=$$((t1 - $$(cat "$(SPARKCAP_HOME)/lint.started"))); \
	  $(PY) -m pytest -q -p no:cacheprovider --durations=30 -n $(TEST_WORKERS) --dist loadgroup \
	  -m "not client_timing"; rc=$$?; t2=$$(date +%s); \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; \
	  $(PY) -m pytest -q -p no:cacheprovider --durations=5 -m client_timing; rc2=$$?; \
	  t3=$$(date +%s); \
	  if [ $$rc2 -eq 5 ]; then echo "pytest collected no client-timing tests"; exit 1; fi; \
	  $(PY) tests/suite_summary.py "$$SPARKCAP_BUILD_LOG" $$lint_s $$((t2 - t1)) $$((t3 - t2)); \
	  for i in $$(seq 900); do [ -s "$(SPARKCAP_HOME)/llama-build.rc" ] && break; sleep 2; done; \
	  grep "^llama-server:" "$(SPARKCAP_HOME)/llama-build.log"; \
	  if [ "$$(cat "$(SPARKCAP_HOME)/llama-build.rc" 2>/dev/null)" != 0 ]; then \
	    echo "llama-server's cold path failed:"; tail -5 "$(SPARKCAP_HOME)/llama-build.log"; exit 1; fi; \
	  [ $$rc -eq 0 ] && exit $$rc2; exit $$rc

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
