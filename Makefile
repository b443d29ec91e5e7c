# Quick start: `make run` (API + worker on the embedded SQLite broker) and `make test` (the whole suite).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
export TRAINYARD_HOST ?= $(HOST)
export TRAINYARD_PORT ?= $(PORT)
# The API logs no line per request.
export TRAINYARD_LOG_LEVEL ?= warning
# Who runs the jobs: local (this machine's worker) or slurm (`make run EXECUTOR=slurm` beside `make slurm`,
# or any cluster SLURM_CONF names; docs/slurm.md).
EXECUTOR ?= local
export TRAINYARD_EXECUTOR ?= $(EXECUTOR)
ifeq ($(EXECUTOR),slurm)
export SLURM_CONF ?= $(CURDIR)/var/slurm/slurm.conf
endif

.PHONY: install install-test migrate run worker api test test-unit test-integration lint sandbox servers slurm slurm-packages gpu-wheels compose-check soak

# `make run` installs what running needs; `make test` adds the test extras (browser driver, linters, the
# fuzzer, the S3 double, lightning), which a first run should not wait for. uv installs them: pip took over a
# minute and a half to unpack torch's 6 GB of files one by one, uv under 20 s (docs/operations.md,
# "Installing"). It compiles no bytecode: the first import of a module writes its own, so bytecode is written
# here even where the environment turns that off. uv reads its own settings (UV_DEFAULT_INDEX, ...), not pip's.
unexport PYTHONDONTWRITEBYTECODE
PIP_INSTALL := $(PY) -m uv pip install -q --python $(PY)
# uv itself, from pip, in a .venv of its own making or one an older checkout made without it.
$(VENV)/bin/uv:
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q "uv>=0.5"

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/uv
	$(PIP_INSTALL) -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed | $(VENV)/bin/uv
	$(PIP_INSTALL) -e '.[test]'
	touch $@

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

# bubblewrap is the sandbox of user code (docs/security.md): a code-bundle job needs it, so `make run`
# installs it from apt when missing.
sandbox:
	@command -v bwrap >/dev/null || (apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null)

migrate: install
	$(VENV)/bin/alembic -c migrations/alembic.ini upgrade head

# Both processes share the terminal's process group, so Ctrl-C reaches both; the trap also stops the
# other one when either exits on its own. The API prints its address and auth mode (app/serve.py); its
# connection limits are TRAINYARD_* settings (docs/operations.md, "Configuration").
# The key that seals users' secrets (docs/secrets.md), made once and kept: readable by its owner alone.
var/secrets.key:
	@mkdir -p var && umask 077 && $(PY) -m core.secrets new-key > $@.tmp && mv $@.tmp $@

run: migrate sandbox var/secrets.key
	@echo "make run: the API and a worker ($(EXECUTOR) executor); Ctrl-C stops both. The CLI is $(VENV)/bin/trainyard (or run"
	@echo "  \`source $(VENV)/bin/activate\` once); from this checkout it finds the API by itself (var/api-url)."
	@trap 'kill -TERM $$api $$wrk 2>/dev/null; wait' INT TERM EXIT; \
	export TRAINYARD_SECRETS_KEY="$${TRAINYARD_SECRETS_KEY:-$$(cat var/secrets.key)}"; \
	$(PY) -m worker & wrk=$$!; \
	$(PY) -m app.serve & api=$$!; \
	wait -n; exit 0

# Where apt-get cannot install them (not root, no apt), one line says what to run rather than a traceback later.
slurm-packages:
	@command -v slurmd >/dev/null && command -v munged >/dev/null || (apt-get update -qq && apt-get install -y -qq slurm-wlm munge >/dev/null) \
		|| { echo "slurm-wlm and munge are missing and apt-get could not install them: as root, run apt-get install slurm-wlm munge" >&2; exit 1; }

# Servers the integration tests start on loopback: redis-server from apt when missing; PostgreSQL's
# binaries are used from /usr/lib/postgresql/15/bin. Debian's chromium is the browser of the dashboard test
# (Playwright drives it and never downloads its own). slurm-wlm and munge make the Slurm cluster of the
# Slurm executor's tests and of `make slurm` (deploy/slurm_cluster.py).
servers: sandbox slurm-packages
	@command -v redis-server >/dev/null || (apt-get update -qq && apt-get install -y -qq redis-server >/dev/null)
	@test -x /usr/lib/postgresql/15/bin/initdb || (apt-get update -qq && apt-get install -y -qq postgresql-15 >/dev/null)
	@test -x /usr/bin/chromium || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

# A Slurm cluster of two nodes on this machine, in the foreground until Ctrl-C: munged, slurmctld and a slurmd
# per node in a network namespace of its own, everything under var/slurm; it prints the SLURM_CONF to export.
# As root: slurm-wlm and munge are installed first when missing.
slurm: install slurm-packages
	$(PY) -m deploy.slurm_cluster --dir var/slurm

# The suite as four pytest processes at once (tests/parts.py), with the linters beside them: the tests on the
# shared running services (then the benchmarks' smoke runs) in the foreground; those with services of their
# own, the soak (then the API's and the core's unit tests), the linters and everything else in the
# background, their output shown once the foreground part ends. Each part prints its 15 slowest tests and its
# 15 costliest in CPU (tests/cpu_report.py, every test's in var/test-<part>.cpu), so that what makes the suite
# long shows: on two cores, the CPU the parts take from each other.
PYTEST := $(VENV)/bin/pytest -q -p no:cacheprovider --durations=15
test: install-test servers
	@mkdir -p var; \
	$(PYTEST) --part soak --cpu-report var/test-soak.cpu > var/test-soak.log 2>&1 & soak=$$!; \
	$(MAKE) --no-print-directory lint > var/test-lint.log 2>&1 & lint=$$!; \
	$(PYTEST) --part rest --cpu-report var/test-rest.cpu > var/test-rest.log 2>&1 & rest=$$!; \
	$(PYTEST) --part services --cpu-report var/test-services.cpu > var/test-services.log 2>&1 & services=$$!; \
	trap 'kill $$soak $$lint $$rest $$services 2>/dev/null' INT TERM; \
	$(PYTEST) --part stacks --cpu-report var/test-stacks.cpu; stacks=$$?; \
	wait $$rest; others=$$?; wait $$services; own=$$?; wait $$soak; soaked=$$?; wait $$lint; linters=$$?; \
	echo "--- the rest (var/test-rest.log) ---"; cat var/test-rest.log; \
	echo "--- the tests with services of their own (var/test-services.log) ---"; cat var/test-services.log; \
	echo "--- the soak (var/test-soak.log) ---"; cat var/test-soak.log; \
	echo "--- the linters (var/test-lint.log) ---"; cat var/test-lint.log; \
	exit $$(( stacks || others || own || soaked || linters ))

test-unit: install-test
	$(VENV)/bin/pytest -q tests/unit

test-integration: install-test servers
	$(VENV)/bin/pytest -q tests/integration

lint: install-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The soak (bench/soak, docs/reliability.md "Soak"): the service under a mixed load from several users while
# its processes are killed at random, then every invariant checked; SOAK_DB=postgres runs it on PostgreSQL +
# Redis. The table goes to the terminal, report.json and summary.md to var/soak/<db>-<time>/; it exits 1 when
# an invariant failed. `make test` runs 2 minutes of its light profile (tests/integration/test_soak.py).
SOAK_MINUTES ?= 30
SOAK_DB ?= sqlite
soak: install-test servers
	$(PY) -m bench.soak --minutes $(SOAK_MINUTES) --db $(SOAK_DB)

# docker-compose.yml run for real, with Docker and images made from Debian (no registry, no GPU needed): it
# becomes healthy, a CPU job succeeds and survives `down` and `up`, nothing runs as root. As root; minutes,
# so apart from `make test` (deploy/compose_check.sh says what it needs).
compose-check: install-test
	PY=$(PY) deploy/compose_check.sh

# Wheels of the web/queue/db stack for the GPU machine's Python 3.12 (see bench/README.md).
LM_WHEELS := transformers|peft|accelerate|tokenizers|safetensors|huggingface[-_]hub|hf-xet|regex|fsspec|filelock|PyYAML|requests|charset-normalizer
gpu-wheels: install-test
	../shared/tools/gpu-wheels.sh nvidia-ml-py psutil prometheus_client boto3 cryptography uvloop httptools
	# Language models' stack, at the versions this venv resolved, without their dependencies: pip would
	# otherwise fetch a torch of its own, far beyond what a device call carries; the image's torch, numpy
	# and tqdm serve.
	$(PY) -m pip freeze | grep -i -E '^($(LM_WHEELS))==' > .whl/lm-requirements.txt
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --abi cp312 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform any -d .whl \
	  -r .whl/lm-requirements.txt
	du -sh .whl
