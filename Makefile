# pgjobq: PGXS for the extension, plus the project's own targets.
#
#   make build     build the install script of the current version from sql/src
#   make install   install the extension into PostgreSQL (PG_CONFIG=... to choose)
#   make check     the quick loop (< 2 min): lint, then the unit, SQL and install-script tests on the
#                  machine's own PostgreSQL only
#   make test      install what is missing, lint, then run the whole test suite (every major)
#   make demo      a throwaway PostgreSQL, 1,000 jobs, 4 workers, a live view
#   make docs      the documentation site, warnings as errors, into docs/_build/html
#   make chaos     the full chaos runs: chaos.py's (200,000 jobs, 8 workers, faults injected),
#                  then chaos-limits', then chaos-durable's
#   make chaos-limits  the flow-control chaos run: 50,000 jobs on limited queues and a 1-second
#                  schedule, 8 workers, faults injected (tests/chaos/chaos_limits.py --full)
#   make chaos-durable  the durable-execution chaos run: 4,000 jobs of steps, durable sleeps and
#                  signals, 4 workers, faults injected (tests/chaos/chaos_durable.py --full)
#   make chaos-net  workers on three test hosts (network namespaces: needs root) while the network
#                  fails: a host cut off, latency, packet loss, half-open connections
#                  (tests/chaos/chaos_net.py --full)
#   make chaos-failover  a primary killed under load and its standby promoted, 40,000 jobs, 8
#                  workers: synchronous, then asynchronous replication (tests/chaos/failover.py)
#   make bench     every contender side by side, report and plots in bench/results (about 20 min)
#   make bench-quick  the same, smaller (< 2 min), without the Node.js peers
#   make bench-node  the Node.js peers of make bench (Graphile Worker, pg-boss) and Node.js 22, from npm
#   make bench-instructions  server instructions per job on the hot paths, this version and the previous
#   make bench-scaling  where one server saturates, what grows with the table, 1 server vs 3 (7-13 min)
#   make bench-upgrade  how long the upgrade from the previous version holds up enqueues and claims (1M jobs)
#   make lint      ruff and mypy
#   make dist      the PGXN distribution: build/pgjobq-X.Y.Z.zip, a git archive of HEAD (committed files)
#   make python/README.md  pgjobq-py's description on the package index, made from README.md
#   make fresh-check  the README's two commands on a clone of main in a pristine Debian root (debootstrap,
#                  built once; needs root): what a new user meets, with how long each took

EXTENSION  = pgjobq
EXTVERSION = $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" $(EXTENSION).control)

# The install script of the current version is built from sql/src/ (one file
# per concern, concatenated in name order) and is not committed; the released
# versions and the upgrade steps between them stay, unchanged, in sql/updates/.
SOURCES    = $(sort $(wildcard sql/src/*.sql))
SCRIPT     = sql/$(EXTENSION)--$(EXTVERSION).sql
DATA_built = $(SCRIPT)
DATA       = $(wildcard sql/updates/$(EXTENSION)--*.sql)

# Concurrency proofs: `make installcheck` runs every spec in
# tests/isolation/specs with pg_isolation_regress against the server that
# PGHOST/PGPORT/PGUSER name (tests/test_isolation.py points it at the test
# server).  Outputs go to ISOLATION_OUTDIR.
ISOLATION        = $(sort $(basename $(notdir $(wildcard tests/isolation/specs/*.spec))))
ISOLATION_OUTDIR ?= tests/isolation/output
ISOLATION_OPTS   = --inputdir=tests/isolation --outputdir=$(ISOLATION_OUTDIR)

# Debian's server pg_config first: /usr/bin/pg_config (libpq-dev) may not know PGXS.
PG_CONFIG ?= $(firstword $(wildcard /usr/lib/postgresql/*/bin/pg_config) pg_config)
PGXS      := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)

# make check is the project's quick loop (below).  PGXS has a check target of its own that only says it
# is not supported, and a makefile defining both warns on every run: so PGXS is left out when check is
# the one target asked for (it needs nothing of PGXS), and check cannot be combined with others.
# On a fresh machine PGXS appears only after `make deps`; the project's
# targets call $(MAKE) install again once it is there.
ifeq ($(MAKECMDGOALS),check)
QUICK_CHECK := yes
else ifneq ($(filter check,$(MAKECMDGOALS)),)
$(error make check runs on its own: make check, then make $(filter-out check,$(MAKECMDGOALS)))
else ifneq ($(wildcard $(PGXS)),)
include $(PGXS)
endif

# Not PYTHON: PGXS defines that one (the interpreter PostgreSQL was built with).
VENV_PYTHON ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python

.PHONY: build deps venv check test demo docs dist lint fresh-check chaos chaos-limits chaos-durable chaos-net chaos-failover bench bench-node bench-quick bench-profile bench-instructions bench-scaling bench-upgrade

build: $(SCRIPT)

# One builder of it, shared with the Python package's plain-SQL installs and the tests: build.py
# (standard library only; run with the system's python3, as make install comes before any virtualenv).
BUILDER    = python/pgjobq/_install/build.py

$(SCRIPT): $(SOURCES) $(EXTENSION).control $(BUILDER)
	@python3 $(BUILDER) --version '$(EXTVERSION)' --output $@ sql/src

deps:
	@tools/ensure-deps

venv: $(VENV)/.installed

# The package (editable) with the extras the tests exercise, the dev and bench dependency groups of
# python/pyproject.toml (PEP 735, not published: pip >= 25.1 installs them, hence pip first), and the
# development tools (tools/pyproject.toml, editable: pg_versions, throwaway_pg, throwaway_pgbouncer),
# which the tests, bench/ and demo/ import by name.
TEST_EXTRAS = async,metrics,otel,web,cli,django,sqlalchemy
DEV_GROUPS  = --group python/pyproject.toml:dev --group python/pyproject.toml:bench

$(VENV)/.installed: python/pyproject.toml tools/pyproject.toml
	$(VENV_PYTHON) -m venv --clear $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade 'pip>=25.1'
	$(VENV)/bin/pip install --quiet -e 'python[$(TEST_EXTRAS)]' $(DEV_GROUPS) -e tools
	touch $@

# The tests never use an installed extension: every server they start gets the working tree's SQL,
# built from sql/src when the session starts (tests/helpers/working_tree.py).

# The quick loop, on the machine's own PostgreSQL only (--own-major): lint (mypy leaves bench/ and demo/
# to make lint), then what is not marked slow of the workers' parts, the SQL API, the isolation specs,
# and the install and upgrade scripts (the Python-version runs are slow: they stay in make test).
CHECK_TESTS = tests/unit tests/sql tests/isolation tests/install

ifdef QUICK_CHECK
check: deps venv
	$(VENV)/bin/ruff check python tests tools demo bench examples docs
	$(VENV)/bin/ruff format --check python tests tools demo bench examples docs
	$(VENV)/bin/mypy python/pgjobq tests tools examples
	$(VENV)/bin/pytest -n 4 --dist loadgroup -q --own-major -m "not slow" $(CHECK_TESTS)
endif

# Four pytest-xdist workers: most tests wait on servers and worker processes,
# so four keep two cores busy; the chaos run's tests stay together (loadgroup).
test: deps venv lint
	$(VENV)/bin/pytest -n 4 --dist loadgroup

demo: deps venv
	@$(MAKE) --no-print-directory install >/dev/null
	$(PY) demo/demo.py

# The site (Sphinx, MyST, furo): -W and -n make every warning and every unresolved reference an error;
# the SQL reference is generated from the catalog of a throwaway server (docs/_ext).  make test runs the
# same build (tests/docs/test_docs_build.py) and every example of the pages (tests/docs/test_examples.py).
docs: venv
	$(VENV)/bin/sphinx-build -W --keep-going -n -q -b html docs docs/_build/html

# The chaos harnesses (tests/chaos) import chaos and helpers from tests/, so they run as modules; like the
# tests, their servers run the working tree's SQL.
CHAOS := PYTHONPATH=tests $(PY) -m

chaos: deps venv
	$(CHAOS) chaos.chaos --full
	$(CHAOS) chaos.chaos_limits --full
	$(CHAOS) chaos.chaos_durable --full

chaos-limits: deps venv
	$(CHAOS) chaos.chaos_limits --full

chaos-durable: deps venv
	$(CHAOS) chaos.chaos_durable --full

chaos-net: deps venv
	$(CHAOS) chaos.chaos_net --full

chaos-failover: deps venv
	$(CHAOS) chaos.failover --full --mode both

bench: venv bench-node
	@tools/ensure-deps bench
	@$(MAKE) --no-print-directory install >/dev/null
	$(PY) bench/run.py --full

# The Node.js peers of `make bench` (Graphile Worker, pg-boss) and the Node.js 22 they run on (the npm
# registry's node package), into bench/node/node_modules as bench/node/package-lock.json pins them; nothing
# there is committed, and `make test` needs none of it.  Without npm, or when the install fails, it says
# so and goes on: the benchmark then reports the Node.js peers as skipped, with the reason.
bench-node:
	@if [ bench/node/node_modules/.package-lock.json -nt bench/node/package-lock.json ]; then :; \
	elif ! command -v npm >/dev/null 2>&1; then \
	  echo "bench-node: npm not found: the benchmark will skip Graphile Worker and pg-boss" >&2; \
	else (cd bench/node && npm ci --no-audit --no-fund --loglevel=error) || \
	  echo "bench-node: npm ci failed: the benchmark will skip Graphile Worker and pg-boss" >&2; fi

bench-quick: venv
	@tools/ensure-deps bench
	@$(MAKE) --no-print-directory install >/dev/null
	$(PY) bench/run.py --quick

bench-profile: venv
	@tools/ensure-deps bench
	@$(MAKE) --no-print-directory install >/dev/null
	$(PY) bench/profile.py

bench-instructions: venv
	@tools/ensure-deps bench
	@$(MAKE) --no-print-directory install >/dev/null
	$(PY) bench/instructions.py --write

bench-scaling: venv
	@tools/ensure-deps bench
	@$(MAKE) --no-print-directory install >/dev/null
	$(PY) bench/scaling.py

bench-upgrade: venv
	@tools/ensure-deps bench
	@$(MAKE) --no-print-directory install >/dev/null
	$(PY) bench/upgrade_lock.py

fresh-check:
	@tools/ensure-deps fresh
	@tools/fresh-check

# The PGXN distribution: every committed file of HEAD (less those .gitattributes marks export-ignore) under
# one folder named for the version, as PGXN wants it; META.json describes it.  tests/packaging/test_pgxn.py
# builds it, checks META.json against the PGXN meta spec and installs the extension from it.
DIST_DIR ?= build
DIST     := $(DIST_DIR)/$(EXTENSION)-$(EXTVERSION).zip

dist:
	@mkdir -p $(DIST_DIR)
	@git diff --quiet HEAD -- || echo "make dist: uncommitted changes are left out (it archives HEAD)" >&2
	git archive --format=zip --prefix=$(EXTENSION)-$(EXTVERSION)/ --output=$(DIST) HEAD
	@echo $(DIST)

# pgjobq-py's description on the package index: README.md with its relative links made absolute
# (tests/packaging/test_long_description.py fails when it is stale).  Always run: the script rewrites the
# file only when it differs, and a hand edit newer than README.md is undone too.
.PHONY: python/README.md
python/README.md:
	python3 tools/pypi_readme.py

lint: venv
	$(VENV)/bin/ruff check python tests tools demo bench examples docs
	$(VENV)/bin/ruff format --check python tests tools demo bench examples docs
	$(VENV)/bin/mypy
