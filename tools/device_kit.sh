#!/usr/bin/env bash
# What a lent GPU machine needs to run Swarm's GPU checks, put in one directory (default
# build/device) that the device tool carries with the working tree: the wheels, for CPython 3.12
# on x86-64, of what Swarm's tests import and such a machine lacks (web3, eth-account, pytest,
# hypothesis, pydantic and what they need: about 19 MB), and Debian's bubblewrap, for the
# leases' sandbox. Its torch, Triton, transformers, peft and nvidia-ml-py are the machine's own.
# Ray's wheel (79 MB) is over what one call carries (64 MiB), so the tests that need Ray run
# where Ray is installed (`make test-gpu`), and tools/device_check.sh says which did not run.
set -euo pipefail
kit=${1:-build/device}
python=${PYTHON:-python3}
rm -rf "$kit" && mkdir -p "$kit/wheels"
"$python" -m pip download --quiet --disable-pip-version-check --only-binary=:all: --implementation cp \
    --python-version "${DEVICE_PYTHON_VERSION:-3.12}" --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 -d "$kit/wheels" \
    "web3>=8.0,<9" "eth-account>=0.14,<0.15" "pydantic>=2.7,<3" pytest hypothesis
(cd "$kit" && apt-get download bubblewrap >/dev/null)
du -sh "$kit"
