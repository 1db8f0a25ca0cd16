# trio-dispatch developer entry points.
#
#   make run     start tdrouterd (conf/router.conf) with tdbroker (conf/broker.xml) attached
#   make test    run the whole test suite (unit + system + rhea interop)
#   make bench   run tdbench with its defaults
#   make clean   remove the virtualenv, node_modules and caches
#
# Everything bootstraps itself on a fresh clone: .venv is created with
# `python3 -m venv` and the project installed editable with its test extra;
# the rhea clients are installed with `npm ci` from the committed lockfile.
# Stamp files make both steps re-run only when their inputs change.

PYTHON      ?= python3
NPM         ?= npm
PYTEST_ARGS ?=
# The suite runs on two pytest-xdist workers, a test file per worker at a time (module fixtures stay in one
# process): the system tests spend most of their time waiting on daemons, and the budget is 10 minutes on
# two cores. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
XDIST_ARGS  := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

VENV        := .venv
VENV_STAMP  := $(VENV)/.installed
RHEA_DIR    := tests/clients/rhea
RHEA_STAMP  := $(RHEA_DIR)/node_modules/.installed

.PHONY: all venv rhea run test bench clean

all: test

venv: $(VENV_STAMP)

rhea: $(RHEA_STAMP)

# (Re)install when the venv is missing or pyproject.toml changed.
$(VENV_STAMP): pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --disable-pip-version-check --quiet -e '.[test]'
	@touch $@

# npm ci wipes node_modules first, so the stamp lives inside it.
$(RHEA_STAMP): $(RHEA_DIR)/package.json $(RHEA_DIR)/package-lock.json
	cd $(RHEA_DIR) && $(NPM) ci --no-audit --no-fund
	@touch $@

# The broker attaches to the router as a peer for 'queue' (it retries until the router listens);
# Ctrl-C reaches both through the terminal's process group, and the trap covers other exits.
run: $(VENV_STAMP)
	@echo "make run: tdrouterd (conf/router.conf, port 5672) with tdbroker (conf/broker.xml, port 5673) attached"
	@$(VENV)/bin/tdbroker -c conf/broker.xml & broker=$$!; \
	trap 'kill $$broker 2>/dev/null; wait $$broker' EXIT INT TERM; \
	$(VENV)/bin/tdrouterd -c conf/router.conf

# pytest exits 5 when it ran no tests; that must fail the build, not pass it.
test: $(VENV_STAMP) $(RHEA_STAMP)
	@status=0; \
	$(VENV)/bin/python -m pytest $(XDIST_ARGS) $(PYTEST_ARGS) || status=$$?; \
	if [ $$status -eq 5 ]; then \
		echo "make test: FAILED - pytest ran no tests (exit status 5)" >&2; \
		exit 1; \
	fi; \
	exit $$status

bench: $(VENV_STAMP)
	$(VENV)/bin/tdbench

clean:
	rm -rf $(VENV) $(RHEA_DIR)/node_modules .pytest_cache .hypothesis build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
