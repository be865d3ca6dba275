"""The lease's launcher: the entrypoint of the lease's Ray job, on whichever machine runs it.

The site submits `python -m provider.lease.launch <lease name>` through Ray's job submission
API (`ray_job`), reserving the lease's CPUs and GPUs on one node of the site, with the lease's
plan in the Ray job's environment: Ray runs it on whichever machine of the site has room, and
that machine needs nothing from the head but the plan. The launcher is the site's own code:
it keeps the lease's directory in its own machine's `$SWARM_HOME/site/leases/<name>`, stages
what the job names (`provider.lease.inputs`), builds the lease's sandbox and runs the worker
inside it (`provider.lease.worker`), then hashes the outputs, meters the units and stores the
result in the buyer's output. What the sandbox prints and the launcher's verdict (its last
line, `provider.lease.outcome`) are the Ray job's log.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from compute.accounting import unit_name
from compute.dataplane import shown
from compute.errors import ComputeError
from compute.node import DATA_FOOTER_READERS, REPORTS_ENV, TRAIN_HELPERS_OFF, TRAIN_POLL, TRAIN_REPORTS
from compute.reports import scalars
from compute.runners.params import ProgramParams
from core import logs
from provider.lease import (
    FETCHED,
    HEAD_ADDRESS_ENV,
    LEASES,
    LOG,
    NODE_ADDRESS_ENV,
    NODE_ENV,
    OUTCOME,
    PLAN_ENV,
    PROJECT,
    REPORTS,
    RUN,
    STAGED,
    WORK,
    untrusted,
)
from provider.lease.devices import DeviceError, LeaseGpus, assign, check
from provider.lease.inputs import (
    InputError,
    fetch_inputs,
    result_binds,
    stage_program,
    store_log,
    store_result,
)
from provider.lease.network import SOCKET_ENV, node_address
from provider.lease.outcome import Outcome, report_line, verdict_line
from provider.lease.plan import LeasePlan
from provider.lease.sandbox import Sandbox, SandboxResult, lease_root, lease_uid


def ray_job(plan: LeasePlan, name: str) -> dict[str, Any]:
    """What the site submits to Ray's job API for lease `name`: the launcher, with the plan in
    its environment and the lease's CPUs and GPUs reserved for it on one node; for a lease
    across nodes, the gang's coordinator (`provider.lease.gang`), which reserves nothing itself
    and places the nodes' launchers all at once. Every machine of a site runs Swarm from the
    same path, as Ray runs its own."""
    env = {"env_vars": {"PYTHONPATH": str(PROJECT), PLAN_ENV: plan.encode(), **logs.child_env()}}
    if plan.nodes > 1:
        return {"entrypoint": f"exec {sys.executable} -m provider.lease.gang {name}", "runtime_env": env}
    return {"entrypoint": f"exec {sys.executable} -m provider.lease.launch {name}",
            "entrypoint_num_cpus": plan.cpus, "entrypoint_num_gpus": plan.gpus or None, "runtime_env": env}


@dataclass(frozen=True)
class Node:
    """One node of a lease across nodes, as its launcher runs it: its index (0 runs the lease's
    Ray head and the job), its network namespace (provider.lease.network) and the path every
    node's sandbox sees its work directory at (node 0's)."""

    index: int
    netns: Path
    at: Path

    @property
    def env(self) -> dict[str, str]:
        return {NODE_ENV: str(self.index), NODE_ADDRESS_ENV: node_address(self.index),
                HEAD_ADDRESS_ENV: node_address(0), **SOCKET_ENV}


def leases_root(env: Mapping[str, str] | None = None) -> Path:
    """Where this machine keeps the leases it runs: `$SWARM_HOME/site/leases`. Ray's processes
    on a site's machines carry the SWARM_HOME they were started in (compute.node.auth_env)."""
    return machine_home(env) / LEASES


def machine_home(env: Mapping[str, str] | None = None) -> Path:
    """This machine's `$SWARM_HOME`, as Ray's processes on it carry it."""
    env = os.environ if env is None else env
    return Path(env.get("SWARM_HOME", ".swarm")).expanduser().resolve()


def lease_sandbox(directory: Path, plan: LeasePlan, binds: tuple[tuple[Path, bool], ...] = (),
                  gpus: LeaseGpus | None = None, node: Node | None = None) -> Sandbox:
    """The lease's sandbox: its work directory, its limits, what it is bound, and the GPUs it was
    given (`provider.lease.devices`): their device nodes and CUDA_VISIBLE_DEVICES. A node of a
    lease across nodes runs in its lease's network and sees the directory the nodes share."""
    gpus = gpus or LeaseGpus()
    work = node.at if node is not None else directory / WORK
    across: dict[str, str] = {}
    if plan.nodes > 1:  # its nodes share their home (Ray Train's ~/ray_results) and their outputs
        binds = (*binds, (Path(plan.shared), True))
        across = {"HOME": str(Path(plan.shared) / "home")}
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "SWARM_OUTPUT_DIR": str(plan.outputs or work / "outputs"),
        "PYTHONPATH": str(PROJECT),
        "SWARM_HOME": str(work / "home"),
        # the lease's own Ray: one node on its loopback, or its nodes over its own network
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1" if plan.nodes > 1 else "0",
        "RAY_AUTH_MODE": "disabled",  # nothing but the lease shares that loopback
        "RAY_USAGE_STATS_ENABLED": "0",
        **TRAIN_HELPERS_OFF,  # for a buyer's own Ray Train program as for a built-in job
        **TRAIN_POLL,
        **TRAIN_REPORTS,  # what a Ray Train run reports, appended to the lease's reports file
        REPORTS_ENV: str(work / REPORTS),
        **DATA_FOOTER_READERS,  # a lease's Parquet reads start one footer reader, not 32 processes
        # The sandbox's copy of the plan, without the verdict's key.
        PLAN_ENV: plan.but(verdict_key="").encode(),
        **logs.child_env(),  # the site's verbosity, for the worker's own logging
        **gpus.env,
        **(node.env if node is not None else {}),
        **across,
    }
    return Sandbox(
        directory / WORK,
        plan.limits(),
        hidden=[Path(p) for p in plan.hidden],
        lease_uid=lease_uid(plan.number),
        env=env,
        binds=binds,
        devices=gpus.binds,
        covered=gpus.covered,
        netns=node.netns if node is not None else None,
        at=node.at if node is not None else None,
    )


def launch(directory: Path, plan: LeasePlan, env: Mapping[str, str] | None = None,
           node: Node | None = None) -> Outcome:
    """Runs the lease's current attempt in its sandbox, in `directory` on this machine, and
    writes its outcome. `env` is the launcher's environment, where Ray named the GPUs it
    reserved for the lease. `node`: the first node of a lease across nodes, whose job runs on
    the lease's Ray once its other nodes (`join`) have joined it."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / OUTCOME).unlink(missing_ok=True)
    work = directory / WORK
    work.mkdir(parents=True, exist_ok=True)
    try:
        gpus = assign(plan.gpus, env)  # the GPUs Ray reserved for it, and their device nodes
    except DeviceError as exc:
        return _device_fault(directory, plan, exc)
    try:
        untrusted.remove(work, RUN)
        untrusted.remove(work, REPORTS)  # an attempt relays what it reports itself
        sandbox = lease_sandbox(directory, plan, result_binds(plan), gpus, node)
    except (InputError, untrusted.Unreadable, OSError) as exc:
        return _input_fault(directory, plan, exc)
    if gpus.devices:
        try:  # seen in its sandbox before its inputs are fetched, and anything of the buyer's runs
            check(sandbox, gpus)
        except DeviceError as exc:
            return _device_fault(directory, plan, exc)
    try:
        if plan.program is not None:
            stage_program(plan, work, directory)
        else:
            fetch_inputs(plan, work, directory)
    except (InputError, untrusted.Unreadable, OSError) as exc:
        return _input_fault(directory, plan, exc)
    with open(directory / LOG, "a") as log:
        echo = _Echo(directory / LOG, log.tell(), work, plan.verdict_key)
        log.write(f"── attempt {plan.attempt} ──\n")
    echo.start()
    try:
        done = sandbox.run([sys.executable, "-m", "provider.lease.worker", str(work)], log=directory / LOG)
    finally:
        echo.finish()
    outcome = _meter(plan, directory, done, gpus)
    _keep_failed_log(directory, plan, outcome)
    outcome.write(directory)
    if outcome.state == "succeeded" or outcome.fault == "buyer":
        # Its result is stored, or it failed for good: the lease's disk is the provider's again.
        # The log and the verdict stay; a lease the site lost keeps its directory to resume from.
        untrusted.remove(directory, WORK)
    return outcome


def join(directory: Path, plan: LeasePlan, node: Node, env: Mapping[str, str] | None = None) -> int:
    """Runs node `node.index` (not the first) of a lease across nodes: its inputs staged and
    checked here as on the first node, at the path the first node's are, and in its sandbox a
    node of the lease's Ray that joins the first node's head over the lease's network, until the
    lease ends (its coordinator stops it). Prints what the sandbox prints; the first node's
    launcher gives the verdict. Returns the sandbox's exit status."""
    directory.mkdir(parents=True, exist_ok=True)
    work = directory / WORK
    work.mkdir(parents=True, exist_ok=True)
    try:
        gpus = assign(plan.gpus, env)
        sandbox = lease_sandbox(directory, plan, result_binds(plan), gpus, node)
        if gpus.devices:
            check(sandbox, gpus)
        if plan.program is not None:
            stage_program(plan, work, directory)
        else:
            fetch_inputs(plan, work, directory)
    except (DeviceError, InputError, untrusted.Unreadable, OSError) as exc:
        print(f"node {node.index} could not start: {_sentence(str(exc))}", flush=True)
        return 1
    with open(directory / LOG, "a") as log:
        echo = _Echo(directory / LOG, log.tell(), work, "")
        log.write(f"── attempt {plan.attempt}, node {node.index} ──\n")
    echo.start()
    try:
        done = sandbox.run([sys.executable, "-m", "provider.lease.worker", str(node.at), "--join"],
                           log=directory / LOG)
    finally:
        echo.finish()
    untrusted.remove(directory, WORK)  # the lease's results are node 0's to store; its inputs go
    for mark in (STAGED, FETCHED):  # and are staged again by a later attempt on this machine
        (directory / mark).unlink(missing_ok=True)
    return done.returncode


def _input_fault(directory: Path, plan: LeasePlan, exc: Exception) -> Outcome:
    """A lease whose inputs or output the site refused: the buyer's fault, before anything ran."""
    outcome = Outcome(state="failed", attempt=plan.attempt, seconds=0.0, returncode=-1,
                      error=_sentence(str(exc)))
    outcome.write(directory)
    untrusted.remove(directory, WORK)  # what was staged goes with the job
    return outcome


def _device_fault(directory: Path, plan: LeasePlan, exc: DeviceError) -> Outcome:
    """A lease the site cannot give the GPUs it bought: the provider's to fix, charged nothing."""
    outcome = Outcome(state="failed", attempt=plan.attempt, seconds=0.0, returncode=-1,
                      error=_sentence(str(exc)), fault="provider")
    outcome.write(directory)
    return outcome


def _meter(plan: LeasePlan, directory: Path, done: SandboxResult, gpus: LeaseGpus) -> Outcome:
    """The attempt's verdict: what broke, or the result's hash and the units it used, and the
    result stored in the buyer's output. Everything the lease left is read as a stranger's
    (`untrusted`): a link, a FIFO or too much of it fails the job as the buyer's fault. A GPU
    lease is billed for the GPUs it was given (never more than it bought), a CPU lease for its CPUs."""
    work = directory / WORK
    use_gpu = plan.gpus > 0
    rate = min(plan.gpus, len(gpus.devices)) if use_gpu else plan.unit_rate
    reserved = rate * done.seconds
    broke = done.broke
    if broke == "time" and plan.unit_seconds < plan.wall_seconds:
        broke = "units"  # stopped when what it held reached its max_units, before its deadline
    # A failure by the buyer's fault is paid for what the lease held: its devices for as long as it ran.
    held = min(plan.max_units, math.ceil(reserved))
    outcome = Outcome(state="failed", attempt=plan.attempt, seconds=done.seconds, returncode=done.returncode,
                      broke=broke, unit=unit_name(use_gpu), peak_memory_bytes=done.peak_memory_bytes,
                      units=held, devices=gpus.uuids)
    if broke:
        return replace(outcome, error=_broke_message(broke, plan))
    try:
        run = (_read_run(plan, work) if plan.program is None
               else _program_run(plan, work, done.returncode, reserved))
        if done.returncode != 0 or run is None:
            return replace(
                outcome, error=_last_error(directory / LOG, work) or f"the job exited with {done.returncode}"
            )
        if plan.job.kind == "serve":  # paid by receipts: its record of what it served is its result
            return replace(outcome, state="succeeded", units=min(plan.max_units, math.ceil(reserved)),
                           metrics=run.get("metrics", {}))
        root, rel, destination = run["result"]
        digest, record = store_result(root, rel, destination, plan.hidden,
                                      beside_outputs=plan.program is None, log=kept_log(directory / LOG))
    except (InputError, untrusted.Unreadable) as exc:
        return replace(outcome, error=_sentence(str(exc)))
    except OSError as exc:
        return replace(outcome, error=f"the site could not store the result in {shown(plan.result)}: {exc}")
    measured = float(run.get("units", 0.0))
    units = min(plan.max_units, math.ceil(min(measured, reserved)))  # never more than it held
    return replace(outcome, state="succeeded", result_hash=digest, result_record=record, units=units,
                   metrics=run.get("metrics", {}))


LOG_KEPT_BYTES = 8 << 20  # what a result keeps of its lease's log: the end of it


def kept_log(path: Path) -> bytes:
    """What the lease printed, as its result keeps it: the whole log, or its last LOG_KEPT_BYTES
    after a line that says how much was left out."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return b""
    if size <= LOG_KEPT_BYTES:
        return path.read_bytes()
    with open(path, "rb") as f:
        f.seek(size - LOG_KEPT_BYTES)
        tail = f.read(LOG_KEPT_BYTES)
    return f"[the first {size - LOG_KEPT_BYTES} bytes of the log are left out]\n".encode() + tail


def _keep_failed_log(directory: Path, plan: LeasePlan, outcome: Outcome) -> None:
    """A lease that failed by its job's fault keeps its log in its directory of the buyer's
    output, for the buyer to read once the site has forgotten it; a log that cannot be written
    there (an output the site may not write, say) stays with the site alone."""
    if outcome.state == "succeeded" or outcome.fault != "buyer":
        return
    with contextlib.suppress(InputError, untrusted.Unreadable, OSError):
        store_log(plan.result, plan.hidden, kept_log(directory / LOG))


def _program_run(plan: LeasePlan, work: Path, returncode: int, reserved: float) -> dict[str, Any] | None:
    """A buyer's program is metered by what it reserved for as long as it ran; its outputs are
    its work directory's `outputs/`, stored in the buyer's output."""
    if returncode != 0:
        return None
    params = plan.job.params_of(ProgramParams)
    root = plan.outputs.parent if plan.outputs is not None else work  # across nodes: what they share
    return {"result": (root, "", plan.result), "units": reserved,
            "metrics": program_metrics(root, params.metrics)}


METRICS_BYTES = 64 << 10  # what the site reads of a program's metrics file


def program_metrics(work: Path, name: str) -> dict[str, Any]:
    """The JSON object a program left in outputs/<name>, read as the lease's (`untrusted`):
    nothing — no metrics, not a failure — when it left none, too much or no JSON object."""
    try:
        raw = untrusted.read_small(work, f"outputs/{name}", METRICS_BYTES)
        found = json.loads(raw) if raw is not None else None
    except (untrusted.Unreadable, ValueError, OSError):
        return {}
    return found if isinstance(found, dict) else {}


def _read_run(plan: LeasePlan, work: Path) -> dict[str, Any] | None:
    """The worker's report, read as the lease's: its result directory must lie in the lease's
    own directories (its work directory, or its directory of the buyer's output)."""
    try:
        raw = json.loads(untrusted.read_small(work, RUN) or b"null")
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    named = Path(str(raw.get("result_dir", "")))
    result: tuple[Path, str, str | None] | None = None
    own = plan.local_result
    if named.is_absolute() and own is not None and _lexically_within(own, named):
        result = (own, named.relative_to(own).as_posix(), None)  # already in the buyer's directory
    elif named.is_absolute() and _lexically_within(work, named):
        result = (work, named.relative_to(work).as_posix(), plan.result)
    elif named.is_absolute() and plan.nodes > 1 and _lexically_within(Path(plan.shared), named):
        result = (Path(plan.shared), named.relative_to(plan.shared).as_posix(), plan.result)
    if result is None:
        return None
    metrics = raw.get("metrics", {})
    units = raw.get("units", 0.0)
    return {"result": result, "units": units if isinstance(units, int | float) else 0.0,
            "metrics": metrics if isinstance(metrics, dict) else {}}


def _lexically_within(parent: Path, path: Path) -> bool:
    """`path` names something under `parent` by its words alone: no `..`, no link resolved."""
    return ".." not in path.parts and path.is_relative_to(parent)


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith(".") else text + "."


def _broke_message(limit: str, plan: LeasePlan) -> str:
    if limit == "memory":
        return (f"the job used more than the {plan.memory_bytes // 2**20} MiB of memory it reserved and was "
                "stopped.")
    if limit == "processes":
        return f"the job started more than the {plan.max_processes} processes it may and was stopped."
    if limit == "disk":
        return (f"the job wrote more than the {plan.disk_bytes // 2**20} MiB of disk a lease may hold "
                "and was stopped.")
    if limit == "units":
        return (f"the job used all {plan.max_units} units its max_units allow and was stopped; post it with "
                "more units.")
    return f"the job ran past its {plan.wall_seconds:.0f} s and was stopped."


def _last_error(log: Path, work: Path | None = None) -> str | None:
    """The log's last line: a built-in runner's refusal is its sentence alone, the lease's own
    paths in it relative to the lease (inputs/dataset/rows.csv), as the buyer named them."""
    lines = [line.strip() for line in untrusted.tail(log).splitlines() if line.strip()]
    if not lines:
        return None
    last = re.sub(r"^compute\.errors\.\w+: (job [^:]+: )?", "", lines[-1])
    return (last.replace(f"{work}/", "") if work else last)[:500]


class _Echo(threading.Thread):
    """Copies what the sandbox writes to the lease's log to the launcher's standard output,
    which Ray keeps as the lease's job log: the site reads it from the head, wherever the
    lease runs. What the lease's Ray Train runs report (its reports file, read as the lease's)
    goes there too, each report a line marked with the lease's key (`report_line`), between
    lines of the log, so the site can tell the reports from what the lease printed."""

    def __init__(self, path: Path, offset: int, work: Path, key: str) -> None:
        super().__init__(daemon=True, name="lease-log")
        self.path, self.offset = path, offset
        self.work, self.key = work, key
        self.reports_read, self.pending, self.relayed = 0, b"", 0
        self.done = threading.Event()

    def run(self) -> None:
        at_line_start = True
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            while True:
                finished = self.done.wait(0.2)
                while chunk := log.read(1 << 16):
                    sys.stdout.buffer.write(chunk)
                    at_line_start = chunk.endswith(b"\n")
                if at_line_start or finished:
                    self._relay_reports(at_line_start)
                sys.stdout.flush()
                if finished:
                    return

    def _relay_reports(self, at_line_start: bool) -> None:
        try:
            fresh = untrusted.read_from(self.work, REPORTS, self.reports_read, 1 << 16)
        except (untrusted.Unreadable, OSError):
            return  # not a file the site reads: the lease reports nothing
        self.reports_read += len(fresh)
        *lines, self.pending = (self.pending + fresh).split(b"\n")
        if len(self.pending) > MAX_REPORT_BYTES:
            self.pending = b""
        for raw in lines:
            report = _report(raw)
            if report is None or self.relayed >= MAX_REPORTS:
                continue
            if not at_line_start:
                sys.stdout.buffer.write(b"\n")
                at_line_start = True
            sys.stdout.write(report_line(self.key, report) + "\n")
            sys.stdout.flush()
            self.relayed += 1

    def finish(self) -> None:
        self.done.set()
        self.join()


MAX_REPORTS = 2000  # reports an attempt relays at most
MAX_REPORT_BYTES = 8192


def _report(raw: bytes) -> dict[str, Any] | None:
    """One line of the reports file as the site relays it, or None: the lease writes that file,
    so only a line of the shape `compute.reports` writes, and of bounded size, passes."""
    if len(raw) > MAX_REPORT_BYTES:
        return None
    try:
        found = json.loads(raw)
    except ValueError:
        return None
    if not (isinstance(found, dict) and set(found) == {"at", "metrics"} and isinstance(found["metrics"], dict)
            and type(found["at"]) in (int, float)):
        return None
    return {"at": float(found["at"]), "metrics": scalars(found["metrics"])}


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


def _refuse_to_launch(name: str, reason: str) -> int:
    """The site cannot run leases as it is set up: the provider's to fix, said in the verdict."""
    plan = LeasePlan.decode(os.environ[PLAN_ENV])
    outcome = Outcome(state="failed", attempt=plan.attempt, seconds=0.0, returncode=-1,
                      error=_sentence(f"the site could not run the lease: {reason}"), fault="provider")
    outcome.write(leases_root() / name)
    print(verdict_line(plan.verdict_key, outcome), flush=True)
    return 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logs.configure(libraries=False)  # the site's verbosity; what the lease prints stays the lease's
    if len(argv) == 7 and argv[1] == "--node" and argv[3] == "--netns" and argv[5] == "--at":
        return _node_main(argv[0], Node(int(argv[2]), Path(argv[4]), Path(argv[6])))
    if len(argv) != 1:
        print("usage: python -m provider.lease.launch NAME [--node INDEX --netns PATH --at PATH]",
              file=sys.stderr)
        return 2
    if os.geteuid() != 0:  # a site run by an ordinary user: root of a namespace of its leases' users
        try:
            command, env = lease_root([sys.executable, "-m", "provider.lease.launch", argv[0]])
        except ComputeError as exc:
            return _refuse_to_launch(argv[0], str(exc))
        os.execvpe(command[0], command, os.environ | env)
    _die_with_parent()
    plan = LeasePlan.decode(os.environ[PLAN_ENV])
    # This machine's own SWARM_HOME (its copy of the cluster token, its other leases) is hidden too.
    plan = plan.but(hidden=(*plan.hidden, str(leases_root().parent.parent)))
    return _launched(leases_root() / argv[0], plan)


def _launched(directory: Path, plan: LeasePlan, node: Node | None = None) -> int:
    """Runs the lease's attempt (or node 0's of a lease across nodes) and prints its verdict, the
    launcher's last line; a failure of the site's own is recorded as the provider's, then raised."""
    started = time.monotonic()
    try:
        outcome = launch(directory, plan, node=node)
    except Exception as exc:  # the site's own failure, not the job's: recorded so the site knows whose
        outcome = Outcome(
            state="failed",
            attempt=plan.attempt,
            seconds=time.monotonic() - started,
            returncode=-1,
            error=f"the site could not run the lease: {type(exc).__name__}: {exc}",
            fault="provider",
        )
        outcome.write(directory)
        print(verdict_line(plan.verdict_key, outcome), flush=True)
        raise
    print(f"lease {outcome.state} after {time.monotonic() - started:.1f} s"
          + (f": {outcome.error}" if outcome.error else ""))
    print(verdict_line(plan.verdict_key, outcome), flush=True)
    return 0 if outcome.state == "succeeded" else 1

def _node_main(name: str, node: Node) -> int:
    """A node of a lease across nodes (started by its coordinator's node actor, as root: only a
    site run as root runs them). Node 0 runs the job and prints the verdict; the others join."""
    _die_with_parent()
    started = time.monotonic()
    directory = leases_root() / node_directory(name, node.index)
    plan = LeasePlan.decode(os.environ[PLAN_ENV])
    plan = plan.but(hidden=(*plan.hidden, str(leases_root().parent.parent)))
    if node.index > 0:
        code = join(directory, plan, node)
        print(f"node {node.index} ended ({code}) after {time.monotonic() - started:.1f} s", flush=True)
        return code
    return _launched(directory, plan, node)


def node_directory(name: str, index: int) -> str:
    """The directory of node `index` of lease `name` on its machine: one of its own, so two nodes
    of a lease on one machine (a devnet's) keep apart, and the site's own directory of the lease
    (on the head) holds only what the site read back."""
    return f"{name}.node{index}"


if __name__ == "__main__":
    sys.exit(main())
