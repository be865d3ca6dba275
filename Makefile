# Swarm — the README's two commands are `make demo` and `make test`. Each installs what
# it needs first (node_modules from the lockfile, a .venv) and is quick the second time.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
NPM_STAMP := node_modules/.swarm-installed
VENV_STAMP := $(VENV)/.swarm-installed
COMPILE_STAMP := $(VENV)/.swarm-compiled
CPU_REFERENCE := build/cpu-reference.json
SLITHER_VENV := $(VENV)/slither
SLITHER_STAMP := $(SLITHER_VENV)/.swarm-installed
# Run from contracts/: the platform binary npm installed (contracts/foundry), so forge's exit code
# reaches make. FORGE_ARGS narrows a run (e.g. --match-path test/Gas.t.sol).
FORGE := ./foundry forge
FORGE_ARGS ?=
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: install compile bytecode postgres browser sandbox mesh system-packages demo test test-gpu device-kit lint slither test-contracts test-python snapshot invariants bench-gas bench-indexer bench-dispatch bench-challenge bench-proof bench-gpu bench-matcher bench-post-to-step bench-sites bench-program bench-oracle bench-merkle bench-econ bench-load bench-demo bench-startup bench-startup-load bench-lease bench-mesh bench-gang bench-failfast bench-serving faults clean

install: $(NPM_STAMP) $(VENV_STAMP) $(COMPILE_STAMP)

$(NPM_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

# uv installs the requirements where pip's settings translate to it (tools/venv_install.py: it
# unpacks wheels side by side, pip one at a time: 16 s against 157 s here), else pip. The venv is
# made without pip (0.2 s; `ensurepip` takes 8): this Python's pip fetches uv into it, and uv gives
# it its own pip with the requirements.
$(VENV_STAMP): pyproject.toml
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) tools/venv_install.py $(PY) -e '.[test]'
	touch $@

# Neither compiles (pip would, one file at a time): compileall compiles on every core, and
# leaves out what no process of Swarm imports: the packages' own test suites and the
# transformers models other than the Auto classes, BERT, GPT-2 and the two that peft loads
# (about a third of the files). Compiled once installed because PYTHONDONTWRITEBYTECODE would
# leave every process compiling Ray and torch again; a file already compiled is left as it is,
# and so is one compileall cannot compile (a template, Python 2).
COMPILE_SKIP := /tests?/|/transformers/models/(?!auto/|bert/|gpt2/|bloom/|encoder_decoder/)[^/]+/
$(COMPILE_STAMP): $(VENV_STAMP)
	$(PY) -m compileall -qq -j0 -x '$(COMPILE_SKIP)' $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || true
	touch $@

compile: $(COMPILE_STAMP)

# Swarm's own modules compiled, every time (about a second): the environment may set
# PYTHONDONTWRITEBYTECODE, and then every process of a run (each command, each Ray worker, each
# lease) would compile what it imports again. A file edited since is compiled again by the
# process that imports it, as before.
SWARM_PACKAGES := core anvil ledger compute wire provider market oracle dashboard scripts devnet tests
bytecode: $(VENV_STAMP)
	@$(PY) -m compileall -qq -j0 $(SWARM_PACKAGES)

# The CPU reference the oracle judges CPU nodes against (compute/reference.py): one core of this
# machine timed on the oracle's challenge, the median of three runs, about 3 s (oracle/cpu_reference.py).
# Measured where it is missing or the challenge's code has changed, before whatever runs an oracle (the
# demo, the tests, the benchmarks that judge); `make cpu-reference` measures again, on a quiet machine.
$(CPU_REFERENCE): $(VENV_STAMP) compute/challenge.py compute/challenge_node.py compute/proof.py oracle/cpu_reference.py oracle/config.toml
	$(PY) -m oracle.cpu_reference

.PHONY: cpu-reference
cpu-reference: $(VENV_STAMP)
	$(PY) -m oracle.cpu_reference

# PostgreSQL for the ledger tests, which start their own throwaway server: Debian's package,
# installed once when no initdb is found (Debian keeps it in /usr/lib/postgresql/<v>/bin).
postgres:
	@if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		echo "Installing PostgreSQL from Debian's packages"; \
		$(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql; \
	fi

# Chromium for the dashboard's browser test, driven by Playwright through the system binary
# (no browser download): Debian's package, installed once when no chromium is found.
browser:
	@if ! command -v chromium >/dev/null 2>&1; then \
		echo "Installing Chromium from Debian's packages"; \
		$(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium; \
	fi

# bubblewrap for the leases' sandbox (provider/lease/sandbox.py), and uidmap's newuidmap, with which
# a site run by an ordinary user gives its leases users of their own: Debian's packages, installed
# once when either is missing.
sandbox:
	@if ! command -v bwrap >/dev/null 2>&1 || ! command -v newuidmap >/dev/null 2>&1; then \
		echo "Installing bubblewrap and uidmap from Debian's packages"; \
		$(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends bubblewrap uidmap; \
	fi

# WireGuard for the mesh between a site's machines (provider/mesh.py): Debian's wireguard-go (a kernel
# without the module, as in a container) and wireguard-tools, nftables to keep Ray's ports to the
# mesh, and tcpdump and iperf3, with which the tests and benches inspect and measure the wire.
mesh:
	@if ! command -v wireguard-go >/dev/null 2>&1 || ! command -v wg >/dev/null 2>&1 || \
	    ! command -v nft >/dev/null 2>&1 || ! command -v tcpdump >/dev/null 2>&1 || \
	    ! command -v iperf3 >/dev/null 2>&1; then \
		echo "Installing wireguard-go, wireguard-tools, nftables, tcpdump and iperf3 from Debian's packages"; \
		$(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
			wireguard-go wireguard-tools nftables tcpdump iperf3; \
	fi

demo: install bytecode sandbox $(CPU_REFERENCE)
	$(VENV)/bin/swarm demo

# What the tests need is fetched side by side (Debian's packages one apt at a time, node_modules,
# the venv), then pytest. The venv's compileall, the contracts' tests, slither and the linters
# run niced beside the light tests, in the cores the Ray tests leave idle, not before pytest:
# forge compiles with solcjs, minutes on one core, and compileall 51 s on both. The tests write
# the bytecode of what they import first (test-python), which compileall then leaves as it is.
test:
	@mkdir -p $(VENV)  # before the two venvs inside it are made
	$(MAKE) --no-print-directory --output-sync=target -j2 system-packages $(NPM_STAMP) $(VENV_STAMP)
	$(MAKE) --no-print-directory test-python BESIDE="compile lint slither test-contracts"

# Style that is checked: ruff (pyproject's [tool.ruff]: the pinned ruff's default rules and all of
# bugbear, pyupgrade, isort, simplify, ruff's own and blind-except; lines of at most 110 characters)
# over the whole tree, and mypy (pyproject's [tool.mypy]: untyped functions' bodies too, numpy typed)
# over the packages, the tests and the benchmarks.
lint: $(VENV_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# -j1: dpkg takes one apt at a time, and a sub-make would otherwise share the caller's -j.
system-packages:
	$(MAKE) --no-print-directory -j1 postgres browser sandbox mesh

# Slither over contracts/src (config: slither.config.json). Fails on a High or Medium finding
# not justified in contracts/slither-triage.md. Its own venv: slither pins web3<8.
$(SLITHER_STAMP): pyproject.toml
	$(PYTHON) -m venv --without-pip $(SLITHER_VENV)
	$(PYTHON) tools/venv_install.py $(SLITHER_VENV)/bin/python --group slither  # not compiled: it runs once
	touch $@

slither: $(NPM_STAMP) $(SLITHER_STAMP)
	$(SLITHER_VENV)/bin/python contracts/slither_check.py

test-contracts: $(NPM_STAMP)
	cd contracts && $(FORGE) test $(FORGE_ARGS)

# Two pytest processes side by side: the modules that need no Ray (`-m light`, tests/conftest.py)
# beside those that do, which run one at a time. The light ones' report follows the others'.
# The light lane, with BESIDE, is about half the heavy one and runs niced: it takes the cores the heavy
# lane leaves idle (while its leases start, its services wait) rather than slowing it down. BESIDE
# runs at the lowest priority (nothing in it keeps time); the light tests at 10, not 19, since some
# of them time a lease's limits.
# BESIDE names targets (`make test`: compile, lint, slither, the contracts' tests) run first in the
# light lane, each whatever the others did, reported with it.
# The tests' processes write the bytecode of what they import (PYTHONDONTWRITEBYTECODE unset):
# each module is compiled once, by whichever process imports it first, the venv's as Swarm's.
BESIDE ?=
test-python: $(NPM_STAMP) $(VENV_STAMP) bytecode postgres sandbox $(CPU_REFERENCE)
	@light_log=$$(mktemp); \
	{ beside=0; $(if $(BESIDE),nice -n 19 $(MAKE) --no-print-directory --keep-going $(BESIDE) || beside=1;) \
	  nice -n 10 env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -m light -p no:cacheprovider && exit $$beside; \
	} > $$light_log 2>&1 & light=$$!; \
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -m "not light"; heavy=$$?; \
	wait $$light; light_status=$$?; \
	echo "── $(if $(BESIDE),$(BESIDE) and )the light modules (pytest -m light) ──"; cat $$light_log; rm -f $$light_log; \
	exit $$(( heavy != 0 || light_status != 0 ))

# Every test marked `gpu`, on a machine with a CUDA device (elsewhere pytest says none ran, and why).
test-gpu: $(VENV_STAMP) bytecode sandbox
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -m gpu -p no:randomly

# For a lent GPU machine that has torch but not Swarm's other packages: the wheels and the
# bubblewrap package tools/device_check.sh installs there, in build/device (carried by the device tool).
device-kit:
	tools/device_kit.sh build/device

# Regenerates the committed gas figures: .gas-snapshot (every test) and snapshots/swarm.json.
snapshot: $(NPM_STAMP)
	cd contracts && $(FORGE) snapshot $(FORGE_ARGS)

# The invariant campaign run deeper than in `make test` (64 runs × 64 calls, a fixed seed):
# INVARIANT_RUNS × INVARIANT_DEPTH calls from a fresh random seed each time, printed first so
# a failure can be replayed with SEED=<seed>.
INVARIANT_RUNS ?= 256
INVARIANT_DEPTH ?= 128
ifndef SEED
SEED := $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
endif
invariants: $(NPM_STAMP)
	@echo "invariants: $(INVARIANT_RUNS) runs x $(INVARIANT_DEPTH) calls, seed $(SEED)"
	cd contracts && FOUNDRY_INVARIANT_RUNS=$(INVARIANT_RUNS) FOUNDRY_INVARIANT_DEPTH=$(INVARIANT_DEPTH) \
		$(FORGE) test --match-path "test/invariant/*" --fuzz-seed $(SEED) $(FORGE_ARGS)

bench-gas: install
	$(PY) bench/gas.py

# Indexer throughput: ≥ 100,000 Swarm events synced into SQLite and PostgreSQL.
bench-indexer: install postgres
	$(PY) bench/indexer.py

# Dispatch overhead of the train runner against a plain TorchTrainer on the same cluster.
bench-dispatch: install
	$(PY) bench/dispatch.py --runs 5

# The benchmark challenge: node time, round trip through Ray, and verification (≤ 5 s per node).
bench-challenge: install $(CPU_REFERENCE)
	$(PY) bench/challenge.py --runs 5

# The challenge as a proof: the oracle's cost of checking it against the node's work (≤ 1 %).
bench-proof: install
	$(PY) bench/proof.py --runs 5

# The challenge on a GPU: TFLOPS per precision against the model's reference (measures nothing without one).
bench-gpu: install
	$(PY) bench/gpu.py --runs 3

# Matcher throughput: 100,000 open jobs on 10,000 providers.
bench-matcher: install
	$(PY) bench/matcher.py --runs 5

# End to end: a posted train job to its first training step, with the market's share.
bench-post-to-step: install
	$(PY) bench/post_to_step.py --runs 5

bench-sites: install
	$(PY) bench/sites.py --runs 5 --leases 50

# A buyer's own Ray Train script through Swarm against `ray job submit` (≤ 1.10); Ray Data ingest.
bench-program: install
	$(PY) bench/program.py --runs 5

# Oracle epoch: score 100,000 providers from 10,000,000 probe samples (≤ 5 s, ≤ 2 GB).
bench-oracle: install $(CPU_REFERENCE)
	$(PY) bench/oracle_epoch.py --runs 5

# Reward tree: 100,000 leaves, built with every proof (≤ 2 s).
bench-merkle: install
	$(PY) bench/merkle.py --runs 5

# Incentives: return on stake of honest, lazy, misdeclaring and fraudulent providers over 200
# epochs scored by the real oracle (bench/results/econ.json, econ.png).
bench-econ: install $(CPU_REFERENCE)
	$(PY) bench/econ/simulate.py --epochs 200 --seeds 5

# Load: 1,000 inference jobs posted in a burst; the time for the market to drain them.
bench-load: install
	$(PY) bench/load.py --jobs 1000

# The demo's wall time, median of three runs (goal ≤ 3 minutes).
bench-demo: install bytecode sandbox $(CPU_REFERENCE)
	$(PY) bench/demo.py --runs 3

# Wall time of `swarm --help`, `swarm provider status` and `swarm token balance` (≤ 0.5 s), median of ten.
bench-startup: install
	$(PY) bench/startup.py --runs 10

# The starts the heavy tests repeat (CLI, Ray, a site, anvil), quiet and beside 1, 2 and 4 busy processes (~25 min).
bench-startup-load: install
	$(PY) bench/startup_under_load.py --runs 5 --load 0,1,2,4

# A lease's start and the storing of its 1 GiB result, on this machine (bench/lease.py).
bench-mesh: install mesh
	$(PY) bench/mesh.py --runs 5 --seconds 5

bench-lease: install sandbox
	$(PY) bench/lease.py --runs 5

# Serving paid by receipts: receipts checked a second on one core (≥ 20,000), the latency they add
# (p50 ≤ 2 ms), calls a second at 1, 16 and 64 clients, batching on and off, a redemption's gas;
# `--long 600` adds the calls one on-chain transaction pays for in a 10-minute run.
bench-serving: install sandbox
	$(PY) bench/serving.py --runs 3 --seconds 8 --calls 400

# Leases across machines: DDP over a lease's own network against plain veth (≥ 0.9), and a two-node
# lease's start to its first training step against a one-node lease's (bench/gang.py).
bench-gang: install mesh sandbox
	$(PY) bench/gang.py --runs 5 --seconds 10 --lease-runs 3

# How soon a challenge, a probe, a bad job, a lost provider and a timed-out job give up.
bench-failfast: install
	$(PY) bench/failfast.py --runs 3

# The fault suite over all 20 seeds and 5 with a mesh site (`make test` runs one of each).
faults: install
	SWARM_FAULT_SEEDS=20 SWARM_MESH_FAULT_SEEDS=5 $(PY) -m pytest tests/faults -p no:randomly

clean:
	rm -rf contracts/out contracts/cache build .pytest_cache .hypothesis
