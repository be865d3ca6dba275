#!/usr/bin/env bash
# Swarm's GPU checks in one run, on a lent machine with a GPU (the device tool's), from the
# working tree and the kit that tools/device_kit.sh made (build/device): it installs what the
# kit carries beside the machine's own packages (pip --target, on PYTHONPATH: the machine's
# Python may itself be a virtual environment), then runs
#   1. what the machine is: nvidia-smi, torch's CUDA, Triton;
#   2. every `gpu` test that needs no Ray (`pytest -m gpu` over the modules that hold them;
#      those that need Ray are named in the summary as not run);
#   3. the challenge on the GPU (bench/gpu.py, make bench-gpu), which writes bench/results/gpu.json.
# Everything it prints and writes goes to $OUT (the device tool brings it back). Exit status:
# the tests' (0 when all that ran passed).
set -uo pipefail
kit=${KIT:-build/device}
out=${OUT:-build/device-out}
mkdir -p "$out"
exec > >(tee "$out/device_check.log") 2>&1
started=$(date +%s)
step() { echo "── $1 ($(( $(date +%s) - started )) s) ──"; }

step "install what the kit carries"
py=${PYTHON:-python3}
site=build/device-site
$py -m pip install --quiet --disable-pip-version-check --no-index --find-links "$kit/wheels" --target "$site" \
    "web3>=8.0,<9" "eth-account>=0.14,<0.15" "pydantic>=2.7,<3" pytest hypothesis || exit 2
export PYTHONPATH="$PWD:$PWD/$site${PYTHONPATH:+:$PYTHONPATH}"
if ! command -v bwrap >/dev/null; then
    dpkg-deb -x "$kit"/bubblewrap_*.deb build/device-bwrap && export PATH="$PWD/build/device-bwrap/usr/bin:$PATH"
fi

step "the machine"
nvidia-smi -L || true
$py - <<'PY'
import importlib.util, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count(),
      [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
for name in ("triton", "ray", "transformers", "peft", "pynvml"):
    spec = importlib.util.find_spec(name)
    print(name, "present" if spec else "MISSING")
PY
bwrap --version

step "pytest -m gpu"
# The modules that hold `gpu` tests: the others import what such a machine lacks (Ray, SQLModel).
$py -m pytest -m gpu -p no:randomly -p no:cacheprovider --junitxml="$out/test-gpu.xml" \
    $(grep -l "mark\.gpu" tests/test_*.py)
status=$?

step "bench/gpu.py"
$py bench/gpu.py --runs 3 && cp bench/results/gpu.json "$out/gpu.json"

step "done"
exit $status
