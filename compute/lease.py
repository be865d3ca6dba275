"""A lease: one job on one provider's site, run as a Ray job of the site's cluster whose
processes live in a sandbox (docs/architecture.md §4).

The site submits `python -m compute.lease launch <lease name>` through Ray's job submission
API, reserving the lease's CPUs, GPUs and memory on one node of the site, with the lease's
plan in the Ray job's environment: Ray runs it on whichever machine of the site has room,
and that machine needs nothing from the head but the plan. That launcher is the site's own
code: it keeps the lease's directory in its own machine's `$SWARM_HOME/site/leases/<name>`,
builds the lease's sandbox (`compute.sandbox`) and runs the work inside it, then measures
what came out. What the sandbox prints and the launcher's verdict (its last line) are the Ray
job's log, which the site reads through Ray's job API from wherever the lease ran.

A lease directory holds:

  work/         the sandbox's writable place: the job's storage (checkpoints and outputs,
                kept across attempts so a retry on the same machine resumes from the last
                checkpoint), and the inputs copied in and checked. A built-in job whose
                buyer's output is a directory here writes its own directory of that output
                instead, the one other place bound writable; the results of every other job
                are copied to the buyer's output when it ends;
  log           everything the sandbox printed;
  outcome.json  the launcher's verdict: succeeded or failed, which limit was broken, the
                result hash (recomputed here from the outputs) and the units.

On the head machine the site's own directory of the lease holds its plan (`lease.json`),
the verdict it read back, and the provider's signature.

Inside the sandbox a built-in job (`train`, `finetune`, `infer`, `tune`) runs on a Ray
instance of the lease's own — one node with exactly the CPUs and GPUs the lease reserved,
on a loopback the sandbox does not share — so nothing the lease runs can reach the site's
cluster, whose Ray API would let it schedule work outside the sandbox.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import sys
import threading
import time
import zlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from compute.dataplane import join, shown
from compute import program
from compute.program import ProgramError
from compute.sandbox import Limits, Sandbox, lease_uid

PLAN = "lease.json"
OUTCOME = "outcome.json"
LOG = "log"
WORK = "work"
RUN = "run.json"  # what the in-sandbox worker reports (its metrics; the launcher trusts no hash in it)
LEASES = Path("site") / "leases"  # under each machine's SWARM_HOME
PLAN_ENV = "SWARM_LEASE_PLAN"  # the plan, in the lease's Ray job, to whichever machine runs it
HERE = "{lease}"  # stands, in a plan's paths, for the lease's directory on the machine that runs it
VERDICT = "swarm-lease-outcome: "  # the launcher's last line: its outcome, as JSON
LEASE_OBJECT_STORE_BYTES = 80 * 2**20  # Ray's smallest is 75 MiB
# Of the memory a lease holds, the share its Ray's object store may use: Ray Data streams a
# dataset through it, and a store much smaller than the batches in flight spills to disk.
OBJECT_STORE_SHARE = 0.2
# Ray's own processes (GCS, raylet, agents) and their threads count against the lease's
# process limit, as everything it starts does.
RAY_PROCESS_ALLOWANCE = 1024
RAY_START_ATTEMPTS = 2  # the lease's own Ray, started again once if a loaded machine was too slow


@dataclass(frozen=True)
class LeasePlan:
    """What the site decided to run for one job."""

    job_id: int
    number: int  # the site's sequence number for this lease (its user's uid when root)
    job: dict[str, Any] | None  # a built-in compute.jobs.ComputeJob as a dict; the launcher sets its storage
    cpus: float
    gpus: float
    memory_bytes: int
    wall_seconds: float
    max_units: int
    max_processes: int = 256
    hidden: tuple[str, ...] = ()  # the provider's SWARM_HOME, the leases directory
    attempt: int = 1
    program: dict[str, Any] | None = None  # the buyer's own program, pinned: market.spec.JobSpec.program()
    result: str = ""  # where the results go: <the buyer's output>/<compute job id>, a directory or a URI
    # (URI, sha256, where in work/): a built-in job's model or dataset that the buyer brings, pinned
    files: tuple[tuple[str, str, str], ...] = ()
    # (job:<id>, its result's location, the chain's resultHash of it, where in work/): the
    # earlier result a built-in job builds on
    prior: tuple[tuple[str, str, str, str], ...] = ()
    verdict_key: str = ""  # marks the launcher's verdict in the job's log; never shown to the lease

    @property
    def local_result(self) -> Path | None:
        """A built-in job's result directory when the buyer's output is a directory here: the
        job then checkpoints into it, bound into the sandbox, so a job that another site sharing
        the directory takes over resumes from its last checkpoint; a URI is copied to instead."""
        if self.job is None or not self.result or "://" in self.result:
            return None
        return Path(self.result)

    def limits(self) -> Limits:
        return Limits(memory_bytes=self.memory_bytes, max_processes=self.max_processes + RAY_PROCESS_ALLOWANCE,
                      wall_seconds=self.wall_seconds)

    def write(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        _write_json(directory / PLAN, asdict(self))

    @classmethod
    def read(cls, directory: Path) -> LeasePlan:
        return cls._from(json.loads((directory / PLAN).read_text()))

    def encode(self) -> str:
        """The plan as one environment value (a program's files are at most 64 KiB)."""
        return base64.b64encode(zlib.compress(json.dumps(asdict(self)).encode())).decode()

    @classmethod
    def decode(cls, text: str) -> LeasePlan:
        return cls._from(json.loads(zlib.decompress(base64.b64decode(text))))

    def located(self, directory: Path) -> LeasePlan:
        """The plan with the built-in job's paths in the lease's directory (HERE) made those of
        `directory`; nothing else is touched (a buyer's program may well contain the text)."""
        if self.job is None:
            return self
        job = json.loads(json.dumps(self.job).replace(HERE, json.dumps(str(directory))[1:-1]))
        return self._from(asdict(self) | {"job": job})

    @classmethod
    def _from(cls, raw: dict[str, Any]) -> LeasePlan:
        return cls(**(raw | {"hidden": tuple(raw.get("hidden", ())),
                             "files": tuple(tuple(f) for f in raw.get("files", ())),
                             "prior": tuple(tuple(p) for p in raw.get("prior", ()))}))


def ray_job(plan: LeasePlan, name: str) -> dict[str, Any]:
    """What the site submits to Ray's job API for lease `name`: the launcher, with the plan in
    its environment and the lease's CPUs and GPUs reserved for it on one node. Every machine
    of a site runs Swarm from the same path, as Ray runs its own."""
    project = str(Path(__file__).resolve().parent.parent)
    return {"entrypoint": f"exec {sys.executable} -m compute.lease launch {name}",
            "entrypoint_num_cpus": plan.cpus, "entrypoint_num_gpus": plan.gpus or None,
            "runtime_env": {"env_vars": {"PYTHONPATH": project, PLAN_ENV: plan.encode()}}}


def leases_root(env: Mapping[str, str] | None = None) -> Path:
    """Where this machine keeps the leases it runs: `$SWARM_HOME/site/leases`. Ray's processes
    on a site's machines carry the SWARM_HOME they were started in (compute.node.auth_env)."""
    env = os.environ if env is None else env
    return Path(env.get("SWARM_HOME", ".swarm")).expanduser().resolve() / LEASES


def verdict_line(plan: LeasePlan, outcome: Outcome) -> str:
    return f"{VERDICT}{plan.verdict_key} {json.dumps(asdict(outcome))}"


def verdict(log: str, key: str) -> Outcome | None:
    """The outcome the launcher printed last in its Ray job's log, if it printed one. The lease's
    own output is in that log too, so only a line with the lease's secret key counts: a job
    that prints a verdict of its own cannot pass for the launcher."""
    mark = f"{VERDICT}{key} "
    for line in reversed(log.splitlines()):
        if key and line.startswith(mark):
            try:
                return Outcome(**json.loads(line[len(mark):]))
            except (ValueError, TypeError):
                return None
    return None


@dataclass(frozen=True)
class Outcome:
    """The launcher's verdict on one attempt."""

    state: str  # "succeeded" | "failed"
    attempt: int
    seconds: float
    returncode: int
    broke: str | None = None  # "memory" | "processes" | "time": the buyer's fault
    error: str | None = None
    result_hash: str | None = None  # 0x sha256 of the outputs' manifest, computed by the launcher
    units: int = 0  # whole units, at most the job's max_units
    unit: str = "cpu-seconds"
    metrics: dict[str, Any] = field(default_factory=dict)
    peak_memory_bytes: int = 0
    fault: str = "buyer"  # whose fault a failure is: the job's ("buyer") or the site's ("provider")

    def write(self, directory: Path) -> None:
        _write_json(directory / OUTCOME, asdict(self))

    @classmethod
    def read(cls, directory: Path) -> Outcome | None:
        path = directory / OUTCOME
        if not path.is_file():
            return None
        return cls(**json.loads(path.read_text()))


def lease_sandbox(directory: Path, plan: LeasePlan, binds: tuple[tuple[Path, bool], ...] = ()) -> Sandbox:
    work = directory / WORK
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "SWARM_OUTPUT_DIR": str(work / "outputs"),
        "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
        "SWARM_HOME": str(work / "home"),
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # the lease's own Ray: one node on its loopback
        "RAY_AUTH_MODE": "disabled",  # nothing but the lease shares that loopback
        "RAY_USAGE_STATS_ENABLED": "0",
        # Ray Train's helpers that a one-node instance of its own has no use for, each an actor
        # process to start: the preemption watcher and the metrics no one scrapes.
        "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
        "RAY_TRAIN_METRICS_ENABLED": "0",
    }
    return Sandbox(work, plan.limits(), hidden=[Path(p) for p in plan.hidden], lease_uid=lease_uid(plan.number),
                   env=env, binds=binds)


def launch(directory: Path, plan: LeasePlan) -> Outcome:
    """Runs the lease's current attempt in its sandbox, in `directory` on this machine, and
    writes its outcome."""
    from compute.accounting import unit_name
    from compute.manifest import result_hash

    directory.mkdir(parents=True, exist_ok=True)
    (directory / OUTCOME).unlink(missing_ok=True)
    work = directory / WORK
    work.mkdir(parents=True, exist_ok=True)
    (work / RUN).unlink(missing_ok=True)
    try:
        sandbox = lease_sandbox(directory, plan, _result_binds(plan))
        if plan.program is not None:
            program.stage(plan, work, plan.hidden, directory / LOG)
            if os.geteuid() == 0:
                program.chown(work, lease_uid(plan.number))
        else:
            _fetch_inputs(plan, work)
    except (ProgramError, NotReadable, OSError) as exc:
        outcome = Outcome(state="failed", attempt=plan.attempt, seconds=0.0, returncode=-1,
                          error=_sentence(str(exc)))
        outcome.write(directory)
        return outcome
    # The sandbox's copy, without the verdict's key: the lease's own directory is all the sandbox shows.
    LeasePlan(**(asdict(plan) | {"verdict_key": ""})).write(work)
    argv = [sys.executable, "-m", "compute.lease", "worker" if plan.program is None else "program", str(work)]
    with open(directory / LOG, "a") as log:
        echo = _Echo(directory / LOG, log.tell())
        log.write(f"── attempt {plan.attempt} ──\n")
    echo.start()
    try:
        done = sandbox.run(argv, log=directory / LOG)
    finally:
        echo.finish()
    use_gpu = plan.gpus > 0
    reserved = (plan.gpus if use_gpu else plan.cpus) * done.seconds
    outcome = Outcome(state="failed", attempt=plan.attempt, seconds=done.seconds, returncode=done.returncode,
                      broke=done.broke, unit=unit_name(use_gpu), peak_memory_bytes=done.peak_memory_bytes)
    run = _read_run(work) if plan.program is None else _program_run(work, done.returncode, reserved)
    if done.broke:
        outcome = _replace(outcome, error=_broke_message(done.broke, plan))
    elif done.returncode != 0 or run is None:
        outcome = _replace(outcome, error=_last_error(directory / LOG, work) or f"the job exited with {done.returncode}")
    elif (bad := _bad_outputs(plan, work)) is not None:
        outcome = _replace(outcome, error=bad)
    else:
        measured = float(run.get("units", 0.0))
        units = min(plan.max_units, math.ceil(min(measured, reserved)))  # never more than it held
        outcome = _replace(outcome, state="succeeded", result_hash=result_hash(Path(run["result_dir"])), units=units,
                           metrics=run.get("metrics", {}))
        try:
            if plan.program is not None:
                program.publish(work, plan.result, plan.hidden)
            elif plan.local_result is None:
                program.writable_output(plan.result, plan.hidden)  # a file:// one, checked as a directory
                _copy(run["result_dir"], plan.result)
        except (ProgramError, OSError) as exc:
            outcome = _replace(outcome, state="failed", error=f"the site could not store the result in "
                                                             f"{shown(plan.result)}: {exc}")
    outcome.write(directory)
    return outcome


def work_in_sandbox(work: Path) -> None:
    """Inside the sandbox: the job on a Ray instance of the lease's own."""
    import ray

    from compute.jobs import ComputeJob, run_job

    plan = LeasePlan.read(work)
    storage = plan.local_result.parent if plan.local_result else work / "storage"
    job = ComputeJob(**(plan.job | {"storage": str(storage)}))
    start_ray(plan, job.provider)
    try:
        result = run_job(job)
    except BaseException:
        ray.shutdown()
        raise
    _write_json(work / RUN, {"result_dir": result.result_dir, "units": result.units,
                             "metrics": _jsonable(result.metrics)})
    # Done: the sandbox's PID namespace ends the lease's Ray with this process, at once, so
    # the result does not wait for a graceful shutdown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def start_ray(plan: LeasePlan, provider: str = ""):
    """The lease's own Ray instance: one node with exactly the lease's CPUs and GPUs, on the
    sandbox's loopback; its processes end with the sandbox."""
    import ray

    from compute.placement import node_labels, node_resources

    for attempt in range(1, RAY_START_ATTEMPTS + 1):
        try:
            return ray.init(num_cpus=max(1, math.ceil(plan.cpus)), num_gpus=math.ceil(plan.gpus),
                            resources=node_resources(provider) if provider else None,
                            labels=node_labels(provider) if provider else None,
                            object_store_memory=object_store_bytes(plan), include_dashboard=False,
                            _node_ip_address="127.0.0.1", _temp_dir="/tmp/ray", configure_logging=False)
        except Exception as exc:  # Ray gives its raylet 30 s to register, which a loaded machine can miss
            ray.shutdown()
            if attempt == RAY_START_ATTEMPTS or "timed out during startup" not in str(exc):
                raise
            print(f"the lease's Ray did not start in time ({exc}); starting it again", flush=True)
    raise AssertionError("unreachable")


def object_store_bytes(plan: LeasePlan) -> int:
    return max(LEASE_OBJECT_STORE_BYTES, int(plan.memory_bytes * OBJECT_STORE_SHARE))


def run_program(work: Path) -> None:
    """Inside the sandbox: the buyer's program, against the lease's own Ray."""
    code = program.run(work, start_ray)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the sandbox's PID namespace ends the lease's Ray at once


def _fetch_inputs(plan: LeasePlan, work: Path) -> None:
    """Copies into the lease the earlier result the job builds on, checked against the chain's
    resultHash of it, and the model or dataset the buyer brings, checked against its pin: one
    that does not match, or cannot be read, is the buyer's fault."""
    from compute import dataplane
    from compute.manifest import OUTPUT_DIR

    for ref, location, result_hash, name in plan.prior:
        target = work / name / OUTPUT_DIR
        if not target.exists():
            what = f"the result of {ref}"
            try:
                program.readable(location, plan.hidden, what, verified=True)
                # The outputs' digest is their manifest's hash: what the chain holds as resultHash.
                dataplane.stage(join(location, OUTPUT_DIR), result_hash, target, what=what)
            except dataplane.DigestMismatch:
                raise NotReadable(f"{what} in {shown(location)} is not the one the chain holds (its files do not "
                                  f"hash to the resultHash {result_hash}); restore it there, or build on "
                                  "another job") from None
            except (dataplane.DataPlaneError, ProgramError) as exc:
                raise NotReadable(str(exc)) from None
    for uri, sha256, name in plan.files:
        target = work / name
        if not target.exists():
            what = Path(name).name.replace("_", " ")
            try:
                program.readable(uri, plan.hidden, what)
                dataplane.stage(uri, sha256, target, what=what)
            except dataplane.DataPlaneError as exc:
                raise NotReadable(str(exc)) from None
    if os.geteuid() == 0:
        for path in [work, *work.rglob("*")]:
            os.chown(path, lease_uid(plan.number), lease_uid(plan.number), follow_symlinks=False)


class NotReadable(Exception):
    """A file the job names that its lease may not have: the buyer's fault."""


def _result_binds(plan: LeasePlan) -> tuple[tuple[Path, bool], ...]:
    """A built-in job's own directory of the buyer's output, when that is a directory here:
    writable and owned by the lease's user. One in what the site keeps from its leases is refused."""
    own = plan.local_result
    if own is None:
        return ()
    program.writable_output(str(own.parent), plan.hidden)
    own.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:  # a job taken over from another lease is this lease's now
        uid = lease_uid(plan.number)
        for path in [own, *own.rglob("*")]:
            os.chown(path, uid, uid, follow_symlinks=False)
    return ((own, True),)


def _copy(source: str, destination: str) -> None:
    """A directory tree between local paths and pyarrow URIs."""
    import pyarrow.fs as pafs

    if "://" not in source and "://" not in destination:
        import shutil

        shutil.copytree(source, destination, dirs_exist_ok=True, symlinks=False)
        return
    import pyarrow as pa

    try:
        pafs.copy_files(source, destination)
    except (pa.ArrowException, ValueError) as exc:
        raise OSError(str(exc)) from exc


def _bad_outputs(plan: LeasePlan, work: Path) -> str | None:
    """A program's outputs are regular files and directories: a link the lease left there would
    have the site, outside the sandbox, hash and store what it points to."""
    if plan.program is None:
        return None
    try:
        program.check_outputs(work)
    except ProgramError as exc:
        return _sentence(str(exc))
    return None


def _program_run(work: Path, returncode: int, reserved: float) -> dict | None:
    """A buyer's program is metered by what it reserved for as long as it ran."""
    if returncode != 0 or not (work / "outputs").is_dir():
        return None
    return {"result_dir": str(work.resolve()), "units": reserved, "metrics": {}}


def _read_run(work: Path) -> dict | None:
    try:
        raw = json.loads((work / RUN).read_text())
    except (OSError, ValueError):
        return None
    result_dir = Path(str(raw.get("result_dir", ""))).resolve()
    plan = LeasePlan.read(work)
    own = [work.resolve()] + ([plan.local_result.resolve()] if plan.local_result else [])
    if not any(result_dir.is_relative_to(d) for d in own) or not (result_dir / "outputs").is_dir():
        return None  # outputs outside the lease's own directories are not its outputs
    return raw | {"result_dir": str(result_dir)}


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith(".") else text + "."


def _broke_message(limit: str, plan: LeasePlan) -> str:
    if limit == "memory":
        return f"the job used more than the {plan.memory_bytes // 2**20} MiB of memory it reserved and was stopped."
    if limit == "processes":
        return f"the job started more than the {plan.max_processes} processes it may and was stopped."
    return f"the job ran past its {plan.wall_seconds:.0f} s and was stopped."


def _last_error(log: Path, work: Path | None = None) -> str | None:
    """The log's last line: a built-in runner's refusal is its sentence alone, the lease's own
    paths in it relative to the lease (inputs/dataset/rows.csv), as the buyer named them."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    if not lines:
        return None
    last = re.sub(r"^compute\.errors\.\w+: (job [^:]+: )?", "", lines[-1])
    return (last.replace(f"{work}/", "") if work else last)[:500]


def _replace(outcome: Outcome, **changes: Any) -> Outcome:
    from dataclasses import replace

    return replace(outcome, **changes)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str, allow_nan=True).replace("NaN", "null")
                      .replace("-Infinity", "null").replace("Infinity", "null"))


def _write_json(path: Path, payload: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2))
    os.replace(tmp, path)


class _Echo(threading.Thread):
    """Copies what the sandbox writes to the lease's log to the launcher's standard output,
    which Ray keeps as the lease's job log: the site reads it from the head, wherever the
    lease runs."""

    def __init__(self, path: Path, offset: int) -> None:
        super().__init__(daemon=True, name="lease-log")
        self.path, self.offset = path, offset
        self.done = threading.Event()

    def run(self) -> None:
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            while True:
                finished = self.done.wait(0.2)
                while chunk := log.read(1 << 16):
                    sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                if finished:
                    return

    def finish(self) -> None:
        self.done.set()
        self.join()


def _die_with_parent() -> None:
    """The launcher is the child of the Ray worker that supervises the lease's Ray job: when
    that worker dies with its node, the launcher is killed, and the sandbox with it (bwrap
    dies with its parent), so a lease the site runs again never runs beside its old self."""
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:  # the parent died before the signal was armed
        sys.exit(1)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in ("launch", "worker", "program"):
        print("usage: python -m compute.lease launch NAME | worker DIRECTORY | program DIRECTORY", file=sys.stderr)
        return 2
    if argv[0] == "worker":
        work_in_sandbox(Path(argv[1]))
        return 0
    if argv[0] == "program":
        run_program(Path(argv[1]))
    _die_with_parent()
    started = time.monotonic()
    directory = leases_root() / argv[1]
    plan = LeasePlan.decode(os.environ[PLAN_ENV]).located(directory)
    # This machine's own SWARM_HOME (its copy of the cluster token, its other leases) is hidden too.
    plan = LeasePlan(**(asdict(plan) | {"hidden": (*plan.hidden, str(leases_root().parent.parent))}))
    try:
        outcome = launch(directory, plan)
    except Exception as exc:  # the site's own failure, not the job's: recorded so the site knows whose
        outcome = Outcome(state="failed", attempt=plan.attempt, seconds=time.monotonic() - started, returncode=-1,
                          error=f"the site could not run the lease: {type(exc).__name__}: {exc}", fault="provider")
        outcome.write(directory)
        print(verdict_line(plan, outcome), flush=True)
        raise
    print(f"lease {outcome.state} after {time.monotonic() - started:.1f} s"
          + (f": {outcome.error}" if outcome.error else ""))
    print(verdict_line(plan, outcome), flush=True)
    return 0 if outcome.state == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
