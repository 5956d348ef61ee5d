# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
# The test runs compile each module once and keep it in .pycache/ (pytest's rewritten test
# modules too), even where the environment says not to write bytecode: compiling the suite and
# its libraries from source again costs each run, and each process it starts, seconds.
PYTEST := PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/.pycache $(VENV)/bin/pytest

.PHONY: setup system-tools run test test-fast test-alerts lint format bench chaos clean console-screenshots

$(INSTALLED): requirements/base.txt requirements/local.txt requirements/production.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements/local.txt
	touch $@

setup: $(INSTALLED)

## System packages the tests drive (Debian's chromium, promtool from its prometheus package,
## nginx), installed when missing.
system-tools:
	bash scripts/ensure_system_tools.sh

## Run web + worker + beat on the embedded default (SQLite, filesystem broker); Ctrl-C stops all.
## The local settings are named: config.wsgi and the Celery app default to production.
run: export DJANGO_SETTINGS_MODULE = config.settings.local
run: setup
	mkdir -p var
	$(PY) manage.py migrate --noinput
	$(PY) manage.py collectstatic --noinput --verbosity 0
	$(PY) manage.py demo_setup
	@# honcho runs as the terminal's foreground job (scripts/foreground.py): a Ctrl-C stops it,
	@# and it stops web, worker and beat, while make, out of that job, never sees the signal
	@# (make answers one with "*** Interrupt" and status 130). A stop asked for (Ctrl-C, a
	@# SIGTERM) is a clean end of `make run`: status 0.
	$(PY) scripts/foreground.py $(VENV)/bin/honcho start -f Procfile

## Run the whole test suite against PostgreSQL (127.0.0.1:5432), Redis (127.0.0.1:6379) and
## RabbitMQ (127.0.0.1:5672).
test: setup system-tools test-alerts
	$(PY) scripts/check_services.py
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/mypy
	$(PYTEST) -n 2 --dist loadgroup --durations=15 $(PYTEST_ARGS)

## The alerting rules of deploy/prometheus/: promtool checks them and runs their unit tests
## (deploy/prometheus/tests/), and checks the shipped Prometheus configuration; promtool is
## installed first when missing.
test-alerts: system-tools
	promtool check rules deploy/prometheus/alerts.yml
	promtool test rules deploy/prometheus/tests/*.yml
	promtool check config deploy/prometheus/prometheus.yml

## While working: the suite without the tests that start processes, a browser or the chaos run,
## or fill tables with tens of thousands of rows (marked slow) and those that migrate the
## database back and forth (marked migrations), in two processes that steal each other's
## remaining tests at the end, on test databases kept from the last run while the migrations
## are the same. The Hypothesis tests draw a third of their examples (tests/examples.py);
## `make test` draws all. ruff, lint-imports and mypy run alongside the tests; their output is
## printed after the tests', and the target fails if any of them or the tests failed.
test-fast: setup
	$(PY) scripts/check_services.py
	@checks=$$(mktemp); \
	{ $(VENV)/bin/ruff check . && $(VENV)/bin/lint-imports --no-cache && $(VENV)/bin/mypy; } \
	  >$$checks 2>&1 & checks_pid=$$!; \
	TEST_EXAMPLES=fast $(PYTEST) -m "not slow and not migrations" -n 2 --dist worksteal \
	  --reuse-db --durations=15 $(PYTEST_ARGS); tests=$$?; \
	wait $$checks_pid; checked=$$?; \
	echo "--- ruff check, lint-imports, mypy (run alongside the tests):"; cat $$checks; \
	rm -f $$checks; \
	if [ $$checked -ne 0 ]; then echo "test-fast: ruff, lint-imports or mypy failed (above)"; fi; \
	[ $$tests -eq 0 ] && [ $$checked -eq 0 ]
	@if command -v promtool >/dev/null; then \
	  promtool check rules deploy/prometheus/alerts.yml && \
	  promtool test rules deploy/prometheus/tests/*.yml && \
	  promtool check config deploy/prometheus/prometheus.yml; \
	else \
	  echo "test-fast: alerting rule tests skipped: promtool is missing (make test installs it)"; \
	fi

## The console's screenshots in docs/console/ (docs/console.md, "What it holds"), taken by the
## browser tests of its lists and of an event's story at 1400 px on realistic rows.
console-screenshots: setup system-tools
	$(PY) scripts/check_services.py
	mkdir -p docs/console
	CONSOLE_SCREENSHOTS=$(CURDIR)/docs/console $(PYTEST) tests/audit/test_console_browser.py \
	  tests/audit/test_story_browser.py tests/audit/test_document_story_browser.py -q

## Benchmarks on PostgreSQL and Redis: figures next to floors from the same run.
bench: setup
	@command -v wrk >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk)
	$(PY) scripts/check_services.py
	$(PY) -m bench.run $(BENCH)

## Chaos suite: faults under load on a private PostgreSQL and Redis, then the invariants.
## CLUSTER=1: the same stack on hosts of its own (network namespaces made by the run, so as
## root) with faults between them: partitions, a host killed, slow and lossy links.
## CHAOS_SEED=N repeats the run that printed seed=N.
chaos: setup
	$(PY) -m $(if $(CLUSTER),chaos.cluster,chaos.run) --size $(or $(CHAOS_SIZE),medium)$(if $(CHAOS_SEED), --seed $(CHAOS_SEED))

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) var staticfiles .pycache .pytest_cache .ruff_cache
