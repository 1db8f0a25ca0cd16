# trio-dispatch developer entry points.
#
#   make run     start tdrouterd (conf/router.conf) with tdbroker (conf/broker.xml) attached
#   make test    run the whole test suite (unit + system + rhea interop + Spark)
#   make bench   run tdbench with its defaults
#   make clean   remove the virtualenv, node_modules and caches
#
# Everything bootstraps itself on a fresh clone: .venv is created with
# `python3 -m venv` and the project installed editable -- `make run` and `make bench`
# with the run-time dependencies only (seconds), `make test` with the test extra
# (pytest, and the flow extra: pyspark, numpy, pyarrow, matplotlib -- hundreds of MB);
# the rhea clients are installed with `npm ci` from the committed lockfile.
# Stamp files make each step re-run only when its inputs change.
# Prerequisites are in README.md ("Set-up"): Python >= 3.11; for `make test` also
# Node.js with npm, Java 17 (Spark) and RabbitMQ (`.ci/install-rabbitmq`).

PYTHON      ?= python3
NPM         ?= npm
PYTEST_ARGS ?=
# The suite runs on two pytest-xdist workers, a test file per worker at a time (module fixtures stay in one
# process): the system tests spend most of their time waiting on daemons, and the budget is 10 minutes on
# two cores. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
XDIST_ARGS  := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

VENV        := .venv
# The installed test extra includes everything `make run` needs, so TEST_STAMP also makes RUN_STAMP.
RUN_STAMP   := $(VENV)/.installed-run
TEST_STAMP  := $(VENV)/.installed-test
# What `make run` starts (override to try another configuration: make run ROUTER_CONF=conf/secure/router.conf).
ROUTER_CONF ?= conf/router.conf
BROKER_CONF ?= conf/broker.xml
RHEA_DIR    := tests/clients/rhea
RHEA_STAMP  := $(RHEA_DIR)/node_modules/.installed

.PHONY: all venv rhea run test bench clean

all: test

venv: $(TEST_STAMP)

rhea: $(RHEA_STAMP)

# Creates the venv with a Python the project runs on (pyproject.toml requires-python), or says which is needed.
MAKE_VENV = test -x $(VENV)/bin/python || { \
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
		echo "make: trio-dispatch needs Python >= 3.11; $(PYTHON) is $$($(PYTHON) --version 2>&1)" \
		     "(use make PYTHON=python3.11, or see README.md, Set-up)" >&2; exit 1; }; \
	$(PYTHON) -m venv $(VENV); }

# (Re)install when the venv is missing or pyproject.toml changed.
$(RUN_STAMP): pyproject.toml
	@$(MAKE_VENV)
	$(VENV)/bin/python -m pip install --disable-pip-version-check --quiet -e .
	@touch $@

$(TEST_STAMP): pyproject.toml
	@$(MAKE_VENV)
	$(VENV)/bin/python -m pip install --disable-pip-version-check --quiet -e '.[test]'
	@touch $@ $(RUN_STAMP)

# npm ci wipes node_modules first, so the stamp lives inside it. Without npm the rhea tests skip (and fail
# under CI=true, tests/system/rhea.py): say so instead of failing make test here.
$(RHEA_STAMP): $(RHEA_DIR)/package.json $(RHEA_DIR)/package-lock.json
	@if command -v $(NPM) >/dev/null 2>&1; then \
		cd $(RHEA_DIR) && $(NPM) ci --no-audit --no-fund && touch node_modules/.installed; \
	else \
		echo "make test: no $(NPM) (Node.js): the rhea interop tests will be skipped; see README.md, Set-up" >&2; \
	fi

# The broker attaches to the router as a peer for 'queue' (it retries until the router listens).
# Ctrl-C reaches both through the terminal's process group. When either daemon exits (a start-up failure
# is one FILE:LINE line on stderr, exit status 1 or 2), the other is stopped and make exits with that
# status. (POSIX sh has no `wait -n`: the loop polls both every half second.)
run: $(RUN_STAMP)
	@echo "make run: tdrouterd ($(ROUTER_CONF)) with tdbroker ($(BROKER_CONF)) attached"
	@$(VENV)/bin/tdbroker -c $(BROKER_CONF) & broker=$$!; \
	$(VENV)/bin/tdrouterd -c $(ROUTER_CONF) & router=$$!; \
	trap 'kill $$broker $$router 2>/dev/null' INT TERM; \
	while kill -0 $$broker 2>/dev/null && kill -0 $$router 2>/dev/null; do sleep 0.5; done; \
	if kill -0 $$broker 2>/dev/null; then first=tdrouterd; other=$$broker; wait $$router; \
	else first=tdbroker; other=$$router; wait $$broker; fi; status=$$?; \
	kill $$other 2>/dev/null; wait $$other; \
	if [ $$status -ne 0 ]; then echo "make run: $$first exited with status $$status; stopped the other" >&2; fi; \
	exit $$status

# pytest exits 5 when it ran no tests; that must fail the build, not pass it. Missing prerequisites are
# named first: their tests skip with the reason (and fail under CI=true).
test: $(TEST_STAMP) $(RHEA_STAMP)
	@command -v java >/dev/null 2>&1 || test -n "$$JAVA_HOME" || \
		echo "make test: no java: the Spark tests will be skipped; install Java 17 (see README.md, Set-up)" >&2
	@test -x /usr/lib/rabbitmq/bin/rabbitmq-server || command -v rabbitmq-server >/dev/null 2>&1 || \
		echo "make test: RabbitMQ is not installed: its tests will be skipped; run .ci/install-rabbitmq" >&2
	@status=0; \
	$(VENV)/bin/python -m pytest $(XDIST_ARGS) $(PYTEST_ARGS) || status=$$?; \
	if [ $$status -eq 5 ]; then \
		echo "make test: FAILED - pytest ran no tests (exit status 5)" >&2; \
		exit 1; \
	fi; \
	exit $$status

bench: $(RUN_STAMP)
	$(VENV)/bin/tdbench

clean:
	rm -rf $(VENV) $(RHEA_DIR)/node_modules .pytest_cache .hypothesis build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
