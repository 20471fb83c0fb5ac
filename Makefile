# AgentPerf Leaderboard. Two commands matter: `make demo` and `make test`.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTHON := $(BIN)/python
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: demo test install browser sandbox lint imports format migrate seed worker beat web check-migrations typecheck clean

$(PYTHON):
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The project itself goes in editable, without dependencies: the `agentperf` CLI in $(BIN)
# (docs/api.md "Vendor CLI"). PYTHONWARNINGS quiets setuptools' notice that folders named
# like the packages come first on the path (they are the packages).
$(STAMP): requirements.txt requirements-dev.txt pyproject.toml | $(PYTHON)
	$(BIN)/pip install -q -r requirements-dev.txt
	PYTHONWARNINGS=ignore $(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# The embedded profile's shared cache is a table (docs/security.md "Shared state across
# processes"); createcachetable is a no-op when it exists or the cache is Redis.
migrate: install
	$(PYTHON) manage.py migrate --noinput
	$(PYTHON) manage.py createcachetable

seed: migrate
	$(PYTHON) manage.py seed_catalog

# Embedded default: SQLite, kombu's SQLite broker and a local artifacts folder under var/.
demo: seed sandbox
	$(PYTHON) manage.py publish_tuning_subset
	$(PYTHON) manage.py demo --host $(HOST) --port $(PORT)

worker: install
	$(BIN)/celery -A config worker -Q "$${QUEUES:-web}" --concurrency "$${CONCURRENCY:-1}" --loglevel INFO

# The periodic reaper (runner.reap_stale_runs every RUN_REAPER_INTERVAL_S, on the web queue).
beat: install
	$(BIN)/celery -A config beat --loglevel INFO --schedule var/celerybeat-schedule

web: install
	$(BIN)/gunicorn config.wsgi -b $(HOST):$(PORT) -w 2

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Imports flow one way: the layers and contracts in pyproject.toml (docs/architecture.md).
imports: install
	$(BIN)/lint-imports

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

check-migrations: install
	$(PYTHON) manage.py makemigrations --check --dry-run

typecheck: install
	$(BIN)/mypy

# Debian's Chromium and ChromeDriver for the browser tests (Playwright launches it by path;
# no browser download), installed when missing.
browser:
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
	  echo "installing Debian's chromium and chromium-driver"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; \
	fi

# Debian's bubblewrap: every launched server runs in its sandbox (docs/security.md).
sandbox:
	@if ! command -v bwrap >/dev/null 2>&1; then \
	  echo "installing Debian's bubblewrap"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; \
	fi

# Starts PostgreSQL/RabbitMQ/Redis if they are down and a private SeaweedFS for the session.
test: install browser sandbox lint imports check-migrations typecheck
	$(PYTHON) -m tests.services $(PYTEST_ARGS)

clean:
	rm -rf var test-artifacts .pytest_cache .mypy_cache .ruff_cache
