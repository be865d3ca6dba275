"""A provider's site (docs/architecture.md §4): the agent on the provider's head machine
that owns the provider's Ray cluster; `provider.api` serves it over HTTPS to those the chain
allows.

`Agent` keeps the leases: each is a Ray job of the site's cluster, submitted through Ray's
job submission API (`provider.lease.launch` is its entrypoint, the plan travels in the job), whose
work runs in a sandbox on whichever machine of the site Ray places it. The site reads a
lease's log and its launcher's verdict back through Ray's job API. A lease is started once
per job: starting it again returns the lease that exists. When the node running a lease is
lost, the site submits the lease again and it resumes from its last checkpoint (in the
buyer's output when that is a directory the site's machines share, or in the lease's
directory when it runs on the same machine again).
When a lease succeeds the site
signs (jobId, provider, price, resultHash, units) with the provider's key: the provider's own
word on the result, which the market must bring to the chain. The site keeps the price it
started the lease at, and signs nothing if the chain no longer shows the job as its provider's
at that price or more: the lease then fails as no fault of the provider's.

This module knows no chain and no market: the caller (`provider.site`) brings the planning of
a lease from a job's spec and the signing of results.

The oracle's measurements run here too: a probe of every live node, and the benchmark
challenge's worker, readied, committed and opened over three requests.

What a request cannot have says so by its class (`core.errors`), which the API answers with
its status: a lease or challenge the site does not hold is `Refused` (404), a site whose Ray
does not answer or has no node free yet is `Unavailable` (503), a node that did not compute
what it was given in time a `ProviderFault` (500).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from compute.challenge import Challenge
from compute.challenge_node import ready_worker
from compute.errors import ProviderFault
from core.errors import Fault, Refused, Unavailable
from provider.auth import JobView, WontSign
from provider.lease import PLAN
from provider.lease.launch import ray_job
from provider.lease.outcome import Outcome, reports, verdict, without_verdicts
from provider.lease.plan import LeasePlan

MAX_ATTEMPTS = 3  # a lease whose node is lost runs again, from its checkpoint, this often
LOG_TAIL_BYTES = 64 * 1024
LOG_CHUNK_BYTES = 64 * 1024  # what one answer to a follower of the log holds at most
TAIL_LINES, TAIL_BYTES = 30, 4096  # a failed lease's last lines, in its status
REPORTS_SHOWN = 20  # a status's latest reports: a follower asking every second misses none
REPORTS_EVERY_S = 1.0  # how often a running lease's reports are read again from its log
PROBE_TIMEOUT_S = 10.0
# A readied challenge's worker holds a CPU (or the GPU) of a node: it ends once the oracle has said
# nothing of it for this long, outside a commit it is computing, so that no challenge the oracle
# readied and left (it failed, or judged without opening) keeps a lease from the node for long.
CHALLENGE_IDLE_S = 10.0
MAX_CHALLENGES = 8  # readied challenges a site holds at once
MAX_CELLS = 4096  # rows one opening request may ask for
PRICE = "price"  # a lease's file: the price per unit (wei) the chain showed when the site started it

log = logging.getLogger(__name__)

# (what the chain says of the job, job_id, spec bytes, lease number, the spec of the job whose
# result it builds on or None) -> the lease to run; raises InvalidJob for a spec it cannot run,
# Refused for a job it will not (provider.site.ChainPlanner)
Planner = Callable[[JobView, int, bytes, int, "bytes | None"], LeasePlan]
# (job_id, the price the lease was started at, result_hash, units) -> the provider's signature; raises
# WontSign when the chain no longer shows the job as the provider's at that price
ResultSigner = Callable[[int, int, bytes, int], bytes]
# (job_id, the price the lease was started at, units) -> the provider's signature that its lease
# failed by the job's fault after `units`; raises WontSign as ResultSigner does
FailureSigner = Callable[[int, int, int], bytes]


class RayJobs:
    """The site's Ray job client: Ray's job submission API on its cluster's dashboard, with Ray's
    own calls. A dashboard that does not answer (the site's Ray not up, or not yet) is
    `Unavailable`, so the request that needed it is answered 503 and asked again; a job Ray does
    not know stays Ray's RuntimeError, which the site reads as a job that ended."""

    def __init__(self, dashboard_url: str) -> None:
        self.url = dashboard_url
        self._client: Any = None  # made on first use: Ray's client asks the dashboard as it is made
        self._lock = threading.Lock()

    def submit_job(self, *, submission_id: str, metadata: dict[str, str], **job: Any) -> str:
        return self._call("submit_job", submission_id=submission_id, metadata=metadata, **job)

    def get_job_status(self, submission_id: str) -> str:
        """pending, running, succeeded, failed or stopped: a `ray.job_submission.JobStatus`."""
        return self._call("get_job_status", submission_id)

    def get_job_logs(self, submission_id: str) -> str:
        return self._call("get_job_logs", submission_id)

    def stop_job(self, submission_id: str) -> bool:
        return self._call("stop_job", submission_id)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            with self._lock:
                if self._client is None:
                    from ray.job_submission import JobSubmissionClient

                    self._client = JobSubmissionClient(self.url)
            return getattr(self._client, method)(*args, **kwargs)
        except OSError as exc:  # the builtin ConnectionError, and requests' errors, which are OSErrors
            log.warning("the site's Ray dashboard at %s did not answer %s: %s", self.url, method, exc)
            raise Unavailable("The site's Ray cluster does not answer now; ask again shortly.") from None


@dataclass(frozen=True)
class LeaseStatus:
    job_id: int
    state: str  # pending | running | succeeded | failed | stopped
    attempt: int
    error: str | None = None
    broke: str | None = None  # the limit a failed lease broke: the buyer's fault
    result_hash: str | None = None
    units: int = 0
    unit: str = "cpu-seconds"
    # 0x, the provider's over (jobId, provider, price, resultHash, units); for a failure by the job's
    # own fault that held units, over (jobId, provider, price, units), which the market charges
    signature: str | None = None
    metrics: dict[str, Any] | None = None
    # a failed lease's: "buyer" (its job), "provider" (the site lost it) or "market" (the chain shows
    # the job assigned otherwise than the site agreed to run it, so it signed nothing)
    fault: str | None = None
    compute_id: str | None = None  # its compute job id: the name of its results in the buyer's output
    result_uri: str | None = None  # where its results went: <the buyer's output>/<compute id>
    # a succeeded lease's result record (compute.manifest): its outputs' hash and its log's digest
    result_record: dict[str, Any] | None = None
    log_tail: str | None = None  # a failed lease's last lines
    # what its Ray Train run reported (compute.reports): the last REPORTS_SHOWN of them, of `reported`
    reports: list[dict[str, Any]] | None = None
    reported: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Agent:
    """The leases of one provider's site, run on its Ray cluster."""

    def __init__(self, root: Path, provider: str, dashboard_url: str, planner: Planner, signer: ResultSigner,
                 hidden: tuple[str, ...] = (), failure_signer: FailureSigner | None = None,
                 shared: Path | None = None) -> None:
        self.root = root
        self.leases = root / "leases"
        self.leases.mkdir(parents=True, exist_ok=True)
        self.provider = provider
        self.planner = planner
        self.signer = signer
        self.failure_signer = failure_signer
        self.hidden = (*hidden, str(self.leases))
        self.shared = shared.resolve() if shared is not None else None
        self.jobs = RayJobs(dashboard_url)
        self.lock = threading.Lock()  # held while a lease is numbered, planned and submitted
        # ticket → (worker, params, until)
        self._challenges: dict[str, tuple[Any, dict[str, Any], float]] = {}
        # a running attempt's submission → (when read, its latest reports, how many)
        self._reported: dict[str, tuple[float, list[dict[str, Any]], int]] = {}

    @property
    def across_nodes(self) -> bool:
        """Whether this site runs leases across nodes: it has a directory its machines share, and
        runs as root with what makes a lease's network (provider.lease.network)."""
        import os
        import shutil

        wireguard = shutil.which("wireguard-go") is not None or Path("/sys/module/wireguard").is_dir()
        return (self.shared is not None and os.geteuid() == 0 and wireguard
                and all(shutil.which(tool) for tool in ("wg", "ip", "nsenter", "unshare")))

    # ── leases ───────────────────────────────────────────────────────────────
    def start(self, job: JobView, job_id: int, spec: bytes, prior: bytes | None = None) -> LeaseStatus:
        """Starts the job's lease, once: a lease that exists is returned as it is. `prior` is
        the spec of the job whose result this one builds on (`job:<id>`), if any."""
        self._expire_challenges()  # a challenge the oracle left holds no node from a lease
        with self.lock:
            directory = self._dir(job, job_id)
            if not (directory / PLAN).is_file():
                plan = self.planner(job, job_id, spec, self.next_number(), prior)
                plan = plan.but(hidden=tuple(plan.hidden) + self.hidden, verdict_key=secrets.token_hex(16))
                if plan.nodes > 1:
                    if not self.across_nodes or self.shared is None:
                        raise Refused(409, f"Job {job_id} asks for {plan.nodes} nodes, and this site runs no "
                                           "lease across nodes; the market offers it to sites that do.")
                    plan = plan.but(shared=str(self.shared / directory.name))
                plan.write(directory)
                (directory / PRICE).write_text(str(job.price_per_unit))
                try:
                    self._submit(directory, plan)
                except Unavailable:  # not submitted: the next start plans it again
                    (directory / PLAN).unlink()
                    raise
                log.info("lease %s of job %s started: %s node(s) of %g CPUs and %g GPUs", directory.name,
                         job_id, plan.nodes, plan.cpus, plan.gpus)
        return self.status(job, job_id)  # outside the lock, which status takes

    def status(self, job: JobView, job_id: int) -> LeaseStatus:
        self._expire_challenges()
        directory = self._existing(job, job_id)
        plan = LeasePlan.read(directory)
        if (directory / "stopped").exists():
            return LeaseStatus(job_id, "stopped", plan.attempt, error="stopped at the market's request",
                               fault="buyer")
        outcome = Outcome.read(directory)
        if outcome is not None and outcome.attempt == plan.attempt:
            return self._finished(job_id, directory, outcome)
        from ray.job_submission import JobStatus

        submission = _submission(directory, plan.attempt)
        state = self.jobs.get_job_status(submission)
        if state == JobStatus.RUNNING:
            shown, count = self._reports(submission, plan.verdict_key)
            return LeaseStatus(job_id, "running", plan.attempt, reports=shown, reported=count)
        if state == JobStatus.PENDING:
            return LeaseStatus(job_id, "pending", plan.attempt)
        outcome = verdict(self._job_log(submission), plan.verdict_key)  # from whichever machine ran it
        if outcome is not None and outcome.attempt == plan.attempt:
            outcome.write(directory)
            return self._finished(job_id, directory, outcome)
        # The Ray job ended with no outcome written: its node was lost under it.
        with self.lock:
            if plan.attempt >= MAX_ATTEMPTS:
                return LeaseStatus(job_id, "failed", plan.attempt, fault="provider",
                                   error=f"the site lost the node running it {plan.attempt} times")
            again = plan.but(attempt=plan.attempt + 1)
            again.write(directory)
            try:
                self._submit(directory, again)
            except Unavailable:  # not submitted: the next status finds the attempt lost again
                plan.write(directory)
                raise
        log.warning("lease %s of job %s lost the node running attempt %s; attempt %s started", directory.name,
                    job_id, plan.attempt, again.attempt)
        return LeaseStatus(job_id, "pending", again.attempt)

    def logs(self, job: JobView, job_id: int) -> str:
        """What the lease's attempts printed, the last LOG_TAIL_BYTES of it, from Ray's job logs."""
        directory = self._existing(job, job_id)
        return self._printed(directory).encode()[-LOG_TAIL_BYTES:].decode(errors="replace")

    def log_since(self, job: JobView, job_id: int, offset: int) -> dict[str, Any]:
        """What the lease's attempts printed from byte `offset` on (at most LOG_CHUNK_BYTES of it),
        for a follower: the text, the offset to ask from next, the log's size, and whether the
        lease has ended (then nothing more will come once `next` reaches `size`)."""
        directory = self._existing(job, job_id)
        state = self.status(job, job_id).state
        printed = self._printed(directory).encode()
        start = min(max(0, offset), len(printed))
        chunk = printed[start:start + LOG_CHUNK_BYTES]
        while chunk and len(chunk) == LOG_CHUNK_BYTES and (chunk[-1] & 0xC0) == 0x80:
            chunk = chunk[:-1]  # not in the middle of a character: the next answer starts it
        return {"offset": start, "next": start + len(chunk), "size": len(printed), "state": state,
                "ended": state in ("succeeded", "failed", "stopped"), "text": chunk.decode(errors="replace")}

    def _printed(self, directory: Path) -> str:
        """What the lease's attempts printed, from Ray's job logs, the launcher's lines left out."""
        plan = LeasePlan.read(directory)
        return without_verdicts("".join(self._job_logs(directory, plan)), plan.verdict_key)

    def _job_logs(self, directory: Path, plan: LeasePlan) -> list[str]:
        """The Ray job log of each of the lease's attempts, in order."""
        return [self._job_log(_submission(directory, attempt)) for attempt in range(1, plan.attempt + 1)]

    def _reports(self, submission: str, key: str) -> tuple[list[dict[str, Any]], int]:
        """The latest reports of a running attempt and how many it relayed, read from its log at
        most every REPORTS_EVERY_S."""
        now = time.monotonic()
        with self.lock:
            cached = self._reported.get(submission)
        if cached is None or now - cached[0] > REPORTS_EVERY_S:
            found = reports(self._job_log(submission), key)
            cached = (now, found[-REPORTS_SHOWN:], len(found))
            with self.lock:
                self._reported[submission] = cached
        return cached[1], cached[2]

    def _job_log(self, submission: str) -> str:
        try:
            return self.jobs.get_job_logs(submission)
        except RuntimeError:  # a job Ray no longer knows, or whose node's log is gone with it
            return ""

    def stop(self, job: JobView, job_id: int) -> LeaseStatus:
        directory = self._existing(job, job_id)
        plan = LeasePlan.read(directory)
        (directory / "stopped").touch()
        with contextlib.suppress(RuntimeError):  # it had ended already
            self.jobs.stop_job(_submission(directory, plan.attempt))
        log.info("lease %s of job %s stopped at the market's request", directory.name, job_id)
        return self.status(job, job_id)

    def _finished(self, job_id: int, directory: Path, outcome: Outcome) -> LeaseStatus:
        plan = LeasePlan.read(directory)
        with self.lock:
            self._reported.pop(_submission(directory, plan.attempt), None)
        logs = self._job_logs(directory, plan)
        log, relayed = without_verdicts("".join(logs), plan.verdict_key), reports(logs[-1], plan.verdict_key)
        status = LeaseStatus(
            job_id,
            outcome.state,
            outcome.attempt,
            error=outcome.error,
            broke=outcome.broke,
            result_hash=outcome.result_hash,
            units=outcome.units,
            unit=outcome.unit,
            metrics=outcome.metrics or None,
            fault=None if outcome.state == "succeeded" else outcome.fault,
            compute_id=plan.job.job_id,
            result_uri=plan.result if outcome.state == "succeeded" else None,
            result_record=outcome.result_record if outcome.state == "succeeded" else None,
            log_tail=None if outcome.state == "succeeded" else tail(log),
            reports=relayed[-REPORTS_SHOWN:],
            reported=len(relayed),
        )
        charged = outcome.fault == "buyer" and outcome.units > 0 and self.failure_signer is not None
        if outcome.state != "succeeded" and not charged:
            return status
        signed = directory / "signature"
        if not signed.is_file():
            agreed = int((directory / PRICE).read_text()) if (directory / PRICE).is_file() else 0
            try:
                if outcome.state == "succeeded":
                    signature = self.signer(job_id, agreed, _result_hash(job_id, outcome), outcome.units)
                elif self.failure_signer is not None:  # a charged failure, as `charged` says
                    signature = self.failure_signer(job_id, agreed, outcome.units)
                else:
                    return status
            except WontSign as exc:
                return LeaseStatus(job_id, "failed", outcome.attempt, error=str(exc), units=outcome.units,
                                   unit=outcome.unit, fault="market", compute_id=plan.job.job_id)
            signed.write_text("0x" + signature.hex())
        return LeaseStatus(**(status.as_dict() | {"signature": signed.read_text().strip()}))

    def _submit(self, directory: Path, plan: LeasePlan) -> None:
        self.jobs.submit_job(submission_id=_submission(directory, plan.attempt),
                             metadata={"swarm_job": str(plan.job_id), "attempt": str(plan.attempt)},
                             **ray_job(plan, directory.name))

    def _dir(self, job: JobView, job_id: int) -> Path:
        """A lease's directory: the job's id and the block it was posted in, so a job id the
        chain reuses after a reorganization is a new lease."""
        return self.leases / (f"{job_id}-{job.posted_in.hex()[:16]}" if job.posted_in else str(job_id))

    def _existing(self, job: JobView, job_id: int) -> Path:
        directory = self._dir(job, job_id)
        if not (directory / PLAN).is_file():
            raise Refused(
                404, f"This site has no lease for job {job_id}; the market starts one when it is assigned."
            )
        return directory

    def next_number(self) -> int:
        """The next lease's number, the site's own (call it holding `lock`)."""
        counter = self.root / "lease-numbers"
        number = int(counter.read_text()) + 1 if counter.is_file() else 1
        counter.write_text(str(number))
        return number

    def capacity(self) -> dict[str, Any]:
        """What the site's live nodes have, summed; its largest node's CPUs and GPUs (the most a
        lease on one node can have); each node's own (`machines`, largest first), which a lease
        across nodes takes one share of each from; and whether this site runs leases across
        nodes (`across_nodes`): what the market may match against."""
        import ray

        nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
        total: dict[str, Any] = {"nodes": len(nodes), "cpus": 0.0, "gpus": 0.0, "memory_gb": 0.0,
                                 "node_cpus": 0.0, "node_gpus": 0.0}
        machines = []
        for node in nodes:
            r = node.get("Resources", {})
            total["cpus"] += r.get("CPU", 0.0)
            total["gpus"] += r.get("GPU", 0.0)
            total["memory_gb"] += r.get("memory", 0.0) / 2**30
            total["node_cpus"] = max(total["node_cpus"], r.get("CPU", 0.0))
            total["node_gpus"] = max(total["node_gpus"], r.get("GPU", 0.0))
            machines.append({"cpus": r.get("CPU", 0.0), "gpus": r.get("GPU", 0.0),
                             "memory_gb": r.get("memory", 0.0) / 2**30})
        total["machines"] = sorted(machines, key=lambda m: (m["gpus"], m["cpus"], m["memory_gb"]),
                                   reverse=True)
        total["across_nodes"] = self.across_nodes
        return total

    # ── the oracle's measurements ────────────────────────────────────────────
    def probe(self, timeout_s: float = PROBE_TIMEOUT_S) -> list[dict[str, Any]]:
        """One probe per live node of the site: its clock and its GPUs, or why it did not answer."""
        # Ray, which the agent loads as it first reaches its cluster
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from compute.telemetry import _probe_task

        nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
        sent = time.time()
        refs = {
            n["NodeID"]: _probe_task.options(
                num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            ).remote()
            for n in nodes
        }
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
        answers = []
        resources = {n["NodeID"]: n.get("Resources", {}) for n in nodes}
        for node_id, ref in refs.items():
            devices = {
                "cpus": resources[node_id].get("CPU", 0.0),
                "gpus_declared": resources[node_id].get("GPU", 0.0),
            }
            if ref in ready:
                _, stamp, gpus = ray.get(ref)
                answers.append({"node_id": node_id, "alive": True, "stamp": stamp, "sent": sent,
                                "latency_s": time.time() - sent, "gpu": asdict(gpus), **devices})
            else:
                ray.cancel(ref, force=True)
                answers.append({"node_id": node_id, "alive": False, "sent": sent,
                                "error": f"no answer within {timeout_s:.0f} s", **devices})
        return answers

    # A challenge (compute.challenge, compute.proof) takes three requests: `challenge_ready`
    # places a worker on one of the site's nodes (its GPU when it has one) before the oracle's
    # clock starts; `challenge_commit` gives it the seed and answers with its Merkle root — what
    # the oracle times — and the node's own timings of the rounds and of the commitment;
    # `challenge_open` opens the rows the oracle then asks for and ends it (asked for none, it
    # ends it unopened: the oracle's way to let go of a worker it will not send a seed). A
    # worker the oracle leaves is ended CHALLENGE_IDLE_S after its last step: by the next request
    # of a challenge or of a lease (the market asks after a pending lease every few seconds).
    def challenge_ready(
        self, params: dict[str, Any], timeout_s: float, vram_mb: float = 0.0
    ) -> dict[str, Any]:
        Challenge(seed=0, **params)  # the size, rounds and stride are valid (else ComputeError)
        self._expire_challenges()
        with self.lock:
            if len(self._challenges) >= MAX_CHALLENGES:
                raise Refused(
                    429, f"This site holds {MAX_CHALLENGES} challenges already; open or let them expire."
                )
        try:
            worker, answer = ready_worker(self.provider, timeout_s, vram_mb)
        except ProviderFault as exc:  # no node free for it yet: the oracle asks again
            raise Unavailable(str(exc)[0].upper() + str(exc)[1:]) from None
        ticket = secrets.token_hex(16)
        with self.lock:
            self._challenges[ticket] = (worker, params, time.monotonic() + CHALLENGE_IDLE_S)
        return {"ticket": ticket, **answer}

    def challenge_commit(self, ticket: str, seed: int, timeout_s: float) -> dict[str, Any]:
        import ray

        worker, params, _ = self._challenge(ticket)
        self._hold(ticket, timeout_s + CHALLENGE_IDLE_S)  # not idle while it computes
        ref = worker.commit.remote({**params, "seed": seed})
        ready, _ = ray.wait([ref], timeout=timeout_s)
        if not ready:
            self._end_challenge(ticket)
            raise ProviderFault(self.provider, f"The challenge was not computed within {timeout_s:g} s.")
        self._hold(ticket, CHALLENGE_IDLE_S)
        committed = ray.get(ref)
        return {key: committed[key] for key in ("root", "rounds_s", "commit_s")}

    def challenge_open(self, ticket: str, cells: list[tuple[int, int]], timeout_s: float) -> dict[str, Any]:
        import ray

        worker, _, _ = self._challenge(ticket)
        if not cells:
            self._end_challenge(ticket)
            return {"openings": []}
        self._hold(ticket, timeout_s + CHALLENGE_IDLE_S)
        try:
            ref = worker.open.remote(cells)
            ready, _ = ray.wait([ref], timeout=timeout_s)
            if not ready:
                raise ProviderFault(self.provider, f"The challenge's rows were not opened within "
                                                   f"{timeout_s:g} s.")
            return {"openings": ray.get(ref)}
        finally:
            self._end_challenge(ticket)

    def _challenge(self, ticket: str) -> tuple[Any, dict[str, Any], float]:
        self._expire_challenges()
        with self.lock:
            held = self._challenges.get(ticket)
        if held is None:
            raise Refused(
                404,
                f"This site holds no challenge {ticket[:32]!r}: ready one first (they end when opened, "
                f"or {CHALLENGE_IDLE_S:g} s after the last step).",
            )
        return held

    def _hold(self, ticket: str, seconds: float) -> None:
        with self.lock:
            held = self._challenges.get(ticket)
            if held is not None:
                self._challenges[ticket] = (held[0], held[1], time.monotonic() + seconds)

    def _end_challenge(self, ticket: str) -> None:
        import ray

        with self.lock:
            held = self._challenges.pop(ticket, None)
        if held is not None:
            ray.kill(held[0])

    def _expire_challenges(self) -> None:
        now = time.monotonic()
        with self.lock:
            expired = [t for t, (_, _, until) in self._challenges.items() if until < now]
        for ticket in expired:
            self._end_challenge(ticket)


def _result_hash(job_id: int, outcome: Outcome) -> bytes:
    """The result hash a lease that succeeded recorded; a Fault if its verdict names none."""
    if outcome.result_hash is None:
        raise Fault(f"Job {job_id}'s lease succeeded but its verdict records no result hash; the site "
                    "cannot sign it.")
    return bytes.fromhex(outcome.result_hash[2:])


def tail(log: str, lines: int = TAIL_LINES, size: int = TAIL_BYTES) -> str:
    """The last `lines` lines of a log, at most `size` bytes of them."""
    kept = "".join(log.splitlines(keepends=True)[-lines:])
    return kept.encode()[-size:].decode(errors="replace")


def _submission(directory: Path, attempt: int) -> str:
    return f"lease-{directory.name}-{attempt}"
