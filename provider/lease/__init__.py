"""A lease: one job on one provider's site, run as a Ray job of the site's cluster whose
processes live in a sandbox (docs/architecture.md §4).

  plan.py     what the site decided to run for a job (`LeasePlan`), planned from the posted
              spec's order (`compute.order`) and the chain's word on an earlier result
  launch.py   the launcher, the Ray job's entrypoint on whichever machine runs the lease: it
              builds the sandbox, runs the work in it, meters what ran and stores the result
  outcome.py  its verdict (`Outcome`) and how the site reads it back from the Ray job's log
  inputs.py   what is copied into the lease and checked before the work starts: the buyer's
              pinned code, inputs, model and dataset, and an earlier job's result
  gang.py     a lease across nodes: its nodes placed all at once, one per machine, their
              launchers started and their network joined (network.py), and their logs relayed
  network.py  a lease's own network: a WireGuard link of the lease's own in each node's namespace
  worker.py   inside the sandbox: the job on a Ray instance of the lease's own
  sandbox.py  the sandbox (bubblewrap) and its limits
  untrusted.py  how the site reads and writes what a lease left: no link followed, no FIFO
              opened, nothing unbounded

A lease directory, on the machine that runs it, holds:

  work/         the sandbox's writable place, the lease's: the site reads it only through
                `untrusted`, and writes into it only before the lease has run there. It holds
                the job's storage (checkpoints and outputs, kept across attempts so a retry on
                the same machine resumes from the last checkpoint), and the inputs copied in
                and checked. A built-in job whose
                buyer's output is a directory here writes its own directory of that output
                instead, the one other place bound writable; the results of every other job
                are copied to the buyer's output when it ends;
  log           everything the sandbox printed;
  staged, fetched  the site's marks that the code and inputs are in place, kept where the
                lease cannot write so a lease cannot have them staged again through its links;
  outcome.json  the launcher's verdict: succeeded or failed, which limit was broken, the
                result hash (recomputed here from the outputs) and the units.

On the head machine the site's own directory of the lease holds its plan (`lease.json`),
the verdict it read back, and the provider's signature.
"""

from __future__ import annotations

from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]  # every machine of a site runs Swarm from the same path
PLAN = "lease.json"
OUTCOME = "outcome.json"
LOG = "log"
WORK = "work"
RUN = "run.json"  # what the in-sandbox worker reports (its metrics; the launcher trusts no hash in it)
REPORTS = "reports.jsonl"  # what its Ray Train runs reported as they ran (compute.reports), in work/
LEASES = Path("site") / "leases"  # under each machine's SWARM_HOME
# The site's marks, beside the log where the lease cannot write: its code and inputs are in place.
STAGED = "staged"
FETCHED = "fetched"
# The plan, to the launcher (its verdict's key in it) and to the sandbox (without the key).
PLAN_ENV = "SWARM_LEASE_PLAN"
# A node of a lease across nodes, to its sandbox: its index, its address and the first node's
# (where the lease's Ray head listens) in the lease's network.
NODE_ENV = "SWARM_LEASE_NODE"
NODE_ADDRESS_ENV = "SWARM_LEASE_NODE_ADDRESS"
HEAD_ADDRESS_ENV = "SWARM_LEASE_HEAD_ADDRESS"
