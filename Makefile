# pgjobq: PGXS for the extension, plus the project's own targets.
#
#   make build     build the install script of the current version from sql/src
#   make install   install the extension into PostgreSQL (PG_CONFIG=... to choose)
#   make test      install what is missing, lint, then run the whole test suite
#   make demo      a throwaway PostgreSQL, 1,000 jobs, 4 workers, a live view
#   make chaos     the full chaos runs: chaos.py's (200,000 jobs, 8 workers, faults injected),
#                  then chaos-limits'
#   make chaos-limits  the flow-control chaos run: 50,000 jobs on limited queues and a 1-second
#                  schedule, 8 workers, faults injected (tests/helpers/chaos_limits.py --full)
#   make chaos-net  workers on three test hosts (network namespaces: needs root) while the network
#                  fails: a host cut off, latency, packet loss, half-open connections
#                  (tests/helpers/chaos_net.py --full)
#   make chaos-failover  a primary killed under load and its standby promoted, 40,000 jobs, 8
#                  workers: synchronous, then asynchronous replication (tests/helpers/failover.py)
#   make bench     every contender side by side, report and plots in bench/results (<= 15 min)
#   make bench-quick  the same, smaller (< 2 min)
#   make bench-instructions  server instructions per job on the hot paths, this version and the previous
#   make bench-scaling  where one server saturates, what grows with the table, 1 server vs 3 (7-13 min)
#   make lint      ruff and mypy
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

# On a fresh machine PGXS appears only after `make deps`; the project's
# targets call $(MAKE) install again once it is there.
ifneq ($(wildcard $(PGXS)),)
include $(PGXS)
endif

# Not PYTHON: PGXS defines that one (the interpreter PostgreSQL was built with).
VENV_PYTHON ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python

.PHONY: build deps venv test demo lint fresh-check chaos chaos-limits chaos-net chaos-failover bench bench-quick bench-profile bench-instructions bench-scaling

build: $(SCRIPT)

$(SCRIPT): $(SOURCES) $(EXTENSION).control
	@{ printf '/* %s: pgjobq %s, the job queue in schema jobq.\n * Built by make from sql/src/: edit those files, not this one. */\n' \
	      '$@' '$(EXTVERSION)'; \
	   for source in $(SOURCES); do printf '\n-- %s\n\n' "$$source"; cat "$$source"; done; } > $@.tmp
	@mv $@.tmp $@

deps:
	@tools/ensure-deps

venv: $(VENV)/.installed

$(VENV)/.installed: python/pyproject.toml
	$(VENV_PYTHON) -m venv --clear $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e 'python[dev,bench]'
	touch $@

# Four pytest-xdist workers: most tests wait on servers and worker processes,
# so four keep two cores busy; the chaos run's tests stay together (loadgroup).
test: deps venv lint
	@$(MAKE) --no-print-directory install >/dev/null
	$(VENV)/bin/pytest -n 4 --dist loadgroup

demo: deps venv
	@$(MAKE) --no-print-directory install >/dev/null
	$(PY) demo/demo.py

chaos: deps venv
	@$(MAKE) --no-print-directory install >/dev/null
	$(PY) tests/helpers/chaos.py --full
	$(PY) tests/helpers/chaos_limits.py --full

chaos-limits: deps venv
	@$(MAKE) --no-print-directory install >/dev/null
	$(PY) tests/helpers/chaos_limits.py --full

chaos-net: deps venv
	@$(MAKE) --no-print-directory install >/dev/null
	$(PY) tests/helpers/chaos_net.py --full

chaos-failover: deps venv
	@$(MAKE) --no-print-directory install >/dev/null
	$(PY) tests/helpers/failover.py --full --mode both

bench: venv
	@tools/ensure-deps bench
	@$(MAKE) --no-print-directory install >/dev/null
	$(PY) bench/run.py --full

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

fresh-check:
	@tools/ensure-deps fresh
	@tools/fresh-check

lint: venv
	$(VENV)/bin/ruff check python tests tools demo bench
	$(VENV)/bin/ruff format --check python tests tools demo bench
	$(VENV)/bin/mypy
