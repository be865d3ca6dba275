#!/usr/bin/env bash
# Swarm's GPU checks in one run, on a lent machine with a GPU (the device tool's), from the
# working tree and the kit that tools/device_kit.sh made (build/device): it installs what the
# kit carries beside the machine's own packages (pip --target, on PYTHONPATH: the machine's
# Python may itself be a virtual environment), then runs
#   1. what the machine is: nvidia-smi, torch's CUDA, Triton;
#   2. every `gpu` test that needs no Ray (those using a Ray fixture or marked `ray` wait for 4);
#   3. the challenge on the GPU (bench/gpu.py, make bench-gpu), which writes bench/results/gpu.json;
#   4. the `gpu` tests that need Ray, with the kit's trimmed Ray (each step under a timeout: TESTS_TIMEOUT_S,
#      BENCH_TIMEOUT_S, RAY_TIMEOUT_S).
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
    "web3>=8.0,<9" "eth-account>=0.14,<0.15" "pydantic>=2.7,<3" pytest hypothesis jsonschema || exit 2
$py -m pip install --quiet --disable-pip-version-check --no-index --no-deps --find-links "$kit/wheels" --target "$site" \
    tensorboardX || exit 2
export PYTHONPATH="$PWD:$PWD/$site${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$site/bin" && printf '#!/usr/bin/env python3\nfrom ray.scripts.scripts import main\nmain()\n' > "$site/bin/ray" \
    && chmod +x "$site/bin/ray" && export PATH="$PWD/$site/bin:$PATH"
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

# The modules that hold `gpu` tests: the others import what such a machine lacks (SQLModel).
modules=$(grep -l "mark\.gpu" tests/test_*.py)
step "pytest -m gpu, without Ray"
timeout "${TESTS_TIMEOUT_S:-150}" $py -m pytest -m gpu -p no:randomly -p no:cacheprovider -rfE \
    --junitxml="$out/test-gpu.xml" $modules
status=$?

step "bench/gpu.py"
timeout "${BENCH_TIMEOUT_S:-180}" $py bench/gpu.py --runs 3 && cp bench/results/gpu.json "$out/gpu.json"

if [ -f "$kit/ray.tar.xz" ]; then
    step "pytest -m gpu, with the kit's Ray"
    # Into the machine's own Python, not the kit's --target directory: a lease's sandbox runs
    # that Python with PYTHONPATH set to Swarm alone, and its Ray must import there too (pip
    # without the kit's directory on its path, where it would find jsonschema already there).
    purelib=$($py -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    env -u PYTHONPATH $py -m pip install --quiet --disable-pip-version-check --no-index --no-deps --find-links "$kit/wheels" \
        jsonschema jsonschema-specifications referencing rpds-py \
        && tar -C "$purelib" -xJf "$kit/ray.tar.xz" && $py -c "import ray; print('ray', ray.__version__)" \
        && SWARM_GPU_TESTS=ray timeout "${RAY_TIMEOUT_S:-180}" $py -m pytest -m gpu -p no:randomly -rfE \
            -p no:cacheprovider --junitxml="$out/test-gpu-ray.xml" $modules
    ray_status=$?
    [ "$status" -eq 0 ] && status=$ray_status
fi

step "done"
exit $status
