#!/usr/bin/env bash
# What a lent GPU machine needs to run Swarm's GPU checks, put in one directory (default
# build/device) that the device tool carries with the working tree: the wheels, for CPython 3.12
# on x86-64, of what Swarm's tests import and such a machine lacks (web3, eth-account, pytest,
# hypothesis, pydantic and what they need: about 19 MB), and Debian's bubblewrap, for the
# leases' sandbox. Its torch, Triton, transformers, peft and nvidia-ml-py are the machine's own.
# Ray's wheel (79 MB) is over what one call carries (64 MiB): the kit holds it trimmed instead
# (ray.tar.xz, about 30 MB: without its Java jar, RLlib, the dashboard's web client and its own
# tests, none of which a `gpu` test uses), with what Ray imports that such a machine lacks
# (jsonschema and its parts, tensorboardX), so the `gpu` tests that need Ray run there too.
set -euo pipefail
kit=${1:-build/device}
python=${PYTHON:-python3}
rm -rf "$kit" && mkdir -p "$kit/wheels"
"$python" -m pip download --quiet --disable-pip-version-check --only-binary=:all: --implementation cp \
    --python-version "${DEVICE_PYTHON_VERSION:-3.12}" --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 -d "$kit/wheels" \
    "web3>=8.0,<9" "eth-account>=0.14,<0.15" "pydantic>=2.7,<3" pytest hypothesis
"$python" -m pip download --quiet --disable-pip-version-check --only-binary=:all: --implementation cp \
    --python-version "${DEVICE_PYTHON_VERSION:-3.12}" --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 -d "$kit/wheels" jsonschema
"$python" -m pip download --quiet --disable-pip-version-check --no-deps -d "$kit/wheels" tensorboardX
ray_version=$("$python" -c "import importlib.metadata as m; print(m.version('ray'))" 2>/dev/null || echo 2.60.0)
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
"$python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: --implementation cp \
    --python-version "${DEVICE_PYTHON_VERSION:-3.12}" --platform manylinux2014_x86_64 -d "$tmp" "ray==$ray_version"
mkdir "$tmp/ray" && (cd "$tmp/ray" && unzip -q "$tmp"/ray-*.whl \
    && rm -rf ray/jars ray/rllib ray/dashboard/client/build ray/tests && find . -name '*.js.map' -delete)
tar -C "$tmp/ray" -cf - . | xz -T0 -6 > "$kit/ray.tar.xz"
(cd "$kit" && apt-get download bubblewrap >/dev/null)
du -sh "$kit"
