# Swarm — the README's two commands are `make demo` and `make test`. Each installs what
# it needs first (node_modules from the lockfile, a .venv) and is quick the second time.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
NPM_STAMP := node_modules/.swarm-installed
VENV_STAMP := $(VENV)/.swarm-installed
FORGE := ../node_modules/.bin/forge

.PHONY: install demo test test-contracts test-python snapshot bench-gas clean

install: $(NPM_STAMP) $(VENV_STAMP)

$(NPM_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

$(VENV_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

demo: install
	$(VENV)/bin/swarm demo

test: test-contracts test-python

test-contracts: $(NPM_STAMP)
	cd contracts && $(FORGE) test

test-python: install
	$(PY) -m pytest

# Regenerates the committed gas figures: .gas-snapshot (every test) and snapshots/swarm.json.
snapshot: $(NPM_STAMP)
	cd contracts && $(FORGE) snapshot

bench-gas: install
	$(PY) bench/gas.py

clean:
	rm -rf contracts/out contracts/cache build .pytest_cache .hypothesis
