"""The market's last phase of each pass (docs/architecture.md §5): jobs that ran are completed
(replicas together, disputed when their results differ), completed ones settled after their
dispute window, jobs past their deadline expired or failed, and a dispute the arbiter left
undecided settled half and half. A failure is sent here too, from whichever phase finds it.
"""

from __future__ import annotations

from ledger import jobs as chain_jobs
from market.records import FINAL_STATES, MarketJob, MarketState
from market.sites import ChargedFailure
from market.tick import Tick


def complete(t: Tick, ready: set[int]) -> None:
    """Completes each replica group whose members all ran, each with the result its provider
    signed; `ready` are the jobs whose results a previous pass recorded."""
    groups: dict[int, list[MarketJob]] = {}
    for record in t.records.values():
        groups.setdefault(record.group_id, []).append(record)
    for members in groups.values():
        ran = [r for r in members if r.state == MarketState.RAN and t.jobs[r.job_id].status == "assigned"]
        if any(r.job_id not in ready for r in ran):
            continue
        waiting = [r for r in members
                   if r.state in (MarketState.QUEUED, MarketState.ASSIGNED, MarketState.RUNNING)]
        if not ran or waiting:
            continue  # replicas complete together, once every one has a result
        _keep_evidence(t, ran)
        for r in ran:
            _complete_one(t, r)


def _keep_evidence(t: Tick, ran: list[MarketJob]) -> None:
    """Records each replica's result where they differ, before any completion, so that a restart
    still disputes them."""
    # Replicas agree on their outputs; each result hash covers its own lease's log too.
    if len({r.outputs_hash or r.result_hash for r in ran}) <= 1:
        return
    evidence = {str(r.job_id): {"provider": r.provider, "result_hash": r.result_hash,
                                "outputs_hash": r.outputs_hash, "result_dir": r.result_dir,
                                "units": r.units} for r in ran}
    for r in ran:
        r.evidence = evidence
        t.session.add(r)
    t.session.commit()


def _complete_one(t: Tick, record: MarketJob) -> None:
    units = int(record.units)  # exactly what the provider signed
    signature = bytes.fromhex((record.result_signature or "0x").removeprefix("0x"))
    receipt = t.market.send(chain_jobs.complete_job, record.job_id,
                            bytes.fromhex((record.result_hash or "0x")[2:]), units, signature)
    if receipt is None:
        return
    t.jobs[record.job_id].status = "completed"
    t.move(record, MarketState.COMPLETED, f"completed with {units} units", receipt)
    t.report.count("completed")


def settle(t: Tick) -> None:
    """Disputes completed replicas that disagree while they may, and pays out the rest once their
    dispute window has passed."""
    for job_id, record in t.records.items():
        job = t.jobs[job_id]
        if record.state != MarketState.COMPLETED or job.status != "completed":
            continue
        if record.evidence and (t.now < job.dispute_end or job.dispute_end == 0):
            receipt = t.market.send(chain_jobs.dispute_job, job_id)
            if receipt is not None:
                hashes = ", ".join(f"{e['provider']}: {e['result_hash']}" for e in record.evidence.values())
                t.move(record, MarketState.DISPUTED, f"replicas disagree ({hashes})", receipt)
                t.report.count("disputed")
            continue
        if job.dispute_end and t.now >= job.dispute_end:
            receipt = t.market.send(chain_jobs.settle_job, job_id)
            if receipt is not None:
                t.move(record, MarketState.SETTLED, "paid out after the dispute window", receipt)
                t.report.count("settled")


def expire(t: Tick) -> None:
    """Past its deadline a posted job is refunded, an assigned one failed, and a dispute the
    arbiter has not ruled on within its arbitration period split half and half."""
    for job_id, job in t.jobs.items():
        record = t.records[job_id]
        if t.now <= job.deadline or record.state in FINAL_STATES:
            continue
        if job.status == "posted":
            receipt = t.market.send(chain_jobs.reclaim_expired, job_id)
            if receipt is not None:
                t.move(record, MarketState.EXPIRED,
                       "no provider took it by its deadline; the buyer is refunded", receipt)
                t.report.count("expired")
        elif job.status == "assigned":
            fail(t, record, "deadline", 0, f"job {job_id} did not finish by its deadline.")
        elif job.status == "disputed" and job.dispute_end \
                and t.now > job.dispute_end + t.market.arbitration_period():
            receipt = t.market.send(chain_jobs.reclaim_expired, job_id)
            if receipt is not None:
                t.move(record, MarketState.SETTLED, "the arbiter did not rule in time; the payment is split "
                       "half and half", receipt)
                t.report.count("settled")


def charge(t: Tick, record: MarketJob, failure: ChargedFailure) -> None:
    """A job that failed by its own fault is charged the units its lease held, as its provider
    signed them; the rest of the escrow goes back to the buyer when it settles."""
    signature = bytes.fromhex(failure.signature.removeprefix("0x"))
    receipt = t.market.send(chain_jobs.charge_job, record.job_id, "job-failed", failure.units, signature)
    if receipt is None:
        return
    record.error, record.result_hash = str(failure), None
    record.units, record.unit = failure.units, failure.unit
    t.jobs[record.job_id].status = "completed"
    t.move(record, MarketState.COMPLETED,
           f"job-failed: {failure} Charged {failure.units} {failure.unit} its lease held.", receipt)
    t.report.count("charged")


def fail(t: Tick, record: MarketJob, reason: str, slash_bps: int, error: str) -> None:
    """Fails the job on chain for `reason`, slashing its provider `slash_bps`; the buyer is refunded."""
    receipt = t.market.send(chain_jobs.fail_job, record.job_id, reason, slash_bps)
    if receipt is None:
        return
    record.error = error
    t.move(record, MarketState.FAILED, f"{reason}: {error}", receipt)
    t.report.count("failed")
