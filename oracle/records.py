"""The oracle's tables in the ledger database (docs/architecture.md §3): its measurements
(`probe_samples`, `challenge_results`, `canary_results`) and each epoch's report and scores (`oracle_epochs`,
`provider_scores`).

The oracle owns them: their metadata is its own (`metadata`), and its own line of migrations
builds them (oracle/migrations, run by the ledger's machinery when a process hands it `ORACLE`).
The market reads the latest finalized scores through a view of its own (market/offers.py), so
the two packages never import each other.

An epoch's state is an `EpochState`, stored as its string; it moves only as `EPOCH_MOVES`
allows, which `move_epoch` checks before it changes anything.
"""

from __future__ import annotations

import time
from enum import StrEnum

from sqlalchemy import BigInteger, Index, MetaData
from sqlmodel import Field, Session, SQLModel

from core.states import Moves
from ledger.indexer.models import NAMING, Json
from ledger.indexer.types import Uint256


class EpochState(StrEnum):
    """An epoch's progress (see oracle.epoch), stored as its value (`oracle_epochs.state`); each
    step is recorded before the next begins."""

    AGGREGATED = "aggregated"  # its report is computed and stored
    SIGNED = "signed"  # the committee's threshold of signatures is stored
    SUBMITTED = "submitted"  # on chain, in its challenge window
    FINALIZED = "finalized"  # its rewards may be claimed


_E = EpochState

# Forward, one step at a time, except that a signed report the chain already shows finalized is
# recorded so; and back, where the chain shows less than the record (a devnet restarted from an
# older state): the stored report is submitted and finalized once more. A report that will not
# settle is not moved but deleted, and its epoch aggregated again.
EPOCH_MOVES = Moves("epoch", "oracle.records.EPOCH_MOVES", EpochState, {
    None: frozenset({_E.AGGREGATED}),
    _E.AGGREGATED: frozenset({_E.SIGNED}),
    _E.SIGNED: frozenset({_E.SUBMITTED, _E.FINALIZED}),
    _E.SUBMITTED: frozenset({_E.FINALIZED, _E.SIGNED}),
    _E.FINALIZED: frozenset({_E.SUBMITTED, _E.SIGNED}),
})
ORACLE_STATES = tuple(EpochState)


class OracleModel(SQLModel):
    """The oracle's tables, in a metadata of their own: what its migrations are compared with."""

    metadata = MetaData(naming_convention=NAMING)


metadata = OracleModel.metadata


class ProbeSample(OracleModel, table=True):
    """One liveness probe of one node of a provider: did it answer in time, and what NVML said
    of its GPUs."""

    __tablename__ = "probe_samples"
    __table_args__ = (Index(None, "chain_id", "at"),)

    id: int | None = Field(default=None, primary_key=True)
    chain_id: int = Field(sa_type=BigInteger)
    provider: str = Field(max_length=42)
    at: float
    ok: bool
    latency_s: float
    node_id: str | None = Field(default=None, max_length=64)
    gpus: int = 0  # what NVML reported on the node that answered
    # NVML's telemetry of the node's GPUs when it answered (None: no GPU, or not reported):
    gpu_utilization_pct: float | None = None  # mean over its GPUs
    gpu_memory_used_mb: float | None = None  # summed over its GPUs
    gpu_temperature_c: float | None = None  # the hottest GPU
    gpu_power_w: float | None = None  # summed over its GPUs


class ChallengeRecord(OracleModel, table=True):
    """One benchmark challenge of one provider, as the oracle checked and timed it.

    `outcome`: "passed" (the proof holds; `measured_gflops` is the oracle's own timing),
    "refuted" (a wrong commitment or opening, garbage, another seed's answer: `proof_ok` is
    False), "late" (no commitment within the timeout: measured as 0 GFLOPS) or "misidentified"
    (`identity_ok` False: the worker's own account of its GPU — NVML's name, memory and UUID,
    the VRAM it allocated — contradicts the declared spec, which is misrepresentation whatever
    it computes, so no seed was sent and it is measured as 0). `node_rounds_s` and
    `node_commit_s` are the node's own account of its time — the rounds, then the commitment —
    as it sent them with the root: recorded to show where a node's time goes, never judged."""

    __tablename__ = "challenge_results"
    __table_args__ = (Index(None, "chain_id", "at"),)

    id: int | None = Field(default=None, primary_key=True)
    chain_id: int = Field(sa_type=BigInteger)
    provider: str = Field(max_length=42)
    at: float
    declared_model: str = Field(max_length=32)
    seed: int = Field(sa_type=BigInteger)  # the oracle draws 63 bits
    proof_ok: bool
    outcome: str = Field(default="passed", max_length=16)
    precision: str = Field(default="fp32", max_length=8)
    seconds: float = 0.0  # seed sent → root received, timed by the oracle
    node_rounds_s: float = 0.0  # the node's word (0 when it gave none)
    node_commit_s: float = 0.0
    # The shape the oracle asked for (a GPU's is timed to its declared model: collector.shape);
    # 0 on a record from before it was kept.
    challenge_size: int = 0
    challenge_rounds: int = 0
    challenge_stride: int = 0
    identity_ok: bool = True
    gpu_name: str = Field(default="", max_length=96)  # NVML's, on a GPU node
    gpu_uuid: str = Field(default="", max_length=96)
    gpu_memory_mb: float = 0.0
    vram_touched_mb: float = 0.0
    measured_gflops: float
    reference_gflops: float
    ratio: float
    device: str = Field(max_length=16)
    gpus: int = 0
    reason: str = ""


class CanaryRecord(OracleModel, table=True):
    """The oracle's canary requests to one serving lease (oracle/canaries.py): bodies drawn from
    `seed` alone, answered by the lease and by the oracle's own run of the model it names.

    `outcome`: "matched" (every answer within compute.serving's tolerance), "mismatched" (one was
    not: another model's answer, or garbage; fraud), "unanswered" (the lease refused or failed a
    call: the buyer was not served either, and the oracle paid nothing for it) or "unchecked"
    (the oracle could not run the model: a checkpoint it cannot read, a price above its limit).
    `answers` keeps what the lease answered, so any committee member can draw the bodies from
    the seed, run the model and check the verdict (oracle.canaries.recheck)."""

    __tablename__ = "canary_results"
    __table_args__ = (Index(None, "chain_id", "at"),)

    id: int | None = Field(default=None, primary_key=True)
    chain_id: int = Field(sa_type=BigInteger)
    provider: str = Field(max_length=42)
    at: float
    lease: str = Field(max_length=64)
    task: str = Field(max_length=16)
    model: str  # a built-in model's name, or the checkpoint's URI
    sha256: str = Field(default="", max_length=64)
    model_seed: int = Field(default=0, sa_type=BigInteger)  # a built-in model's weights come from it
    max_tokens: int = 0
    seed: int = Field(sa_type=BigInteger)  # the canaries' bodies come from it
    requests: int = 0  # canary calls made
    matched: int = 0  # answers within the tolerance
    outcome: str = Field(max_length=16)
    reason: str = ""
    answers: list = Field(default_factory=list, sa_type=Json)  # the lease's answers, in order
    paid_wei: int = Field(default=0, sa_type=Uint256)  # what the site charged the oracle for them


class OracleEpoch(OracleModel, table=True):
    """One epoch's report as the oracle builds, signs, submits and finalizes it."""

    __tablename__ = "oracle_epochs"

    chain_id: int = Field(sa_type=BigInteger, primary_key=True)
    epoch: int = Field(sa_type=BigInteger, primary_key=True)
    state: str = Field(max_length=16)
    window_start: float
    window_end: float
    from_block: int = Field(sa_type=BigInteger)  # chain events after this block and up to to_block count
    to_block: int = Field(sa_type=BigInteger)
    utilization: float = 0.0
    emission_wei: int = Field(default=0, sa_type=Uint256)
    rewards_root: str = Field(max_length=66)
    # ledger.reports.Slash's fields, with row, detail and deferred
    slashes: list = Field(default_factory=list, sa_type=Json)
    cumulative_total: int = Field(default=0, sa_type=Uint256)  # the sum of the tree's leaves
    expires_at: int = Field(default=0, sa_type=BigInteger)  # chain time after which it may not be submitted
    signatures: list = Field(default_factory=list, sa_type=Json)  # [signer, 0x signature]
    submit_tx: str | None = Field(default=None, max_length=66)
    finalize_tx: str | None = Field(default=None, max_length=66)
    created_at: float = 0.0
    updated_at: float = 0.0


class ProviderScore(OracleModel, table=True):
    """A provider's scores and reward in one epoch (what `swarm oracle show` prints)."""

    __tablename__ = "provider_scores"
    __table_args__ = (Index(None, "chain_id", "provider"),)

    chain_id: int = Field(sa_type=BigInteger, primary_key=True)
    epoch: int = Field(sa_type=BigInteger, primary_key=True)
    provider: str = Field(max_length=42, primary_key=True)
    samples: int = 0
    uptime: float = 0.0
    measured_gflops: float | None = None
    performance: float = 0.0
    reliability: float = 0.0
    loyalty: float = 0.0
    epochs_staked: int = 0
    weight: float = 0.0
    eligible: bool = False
    reward_wei: int = Field(default=0, sa_type=Uint256)
    cumulative_wei: int = Field(default=0, sa_type=Uint256)
    note: str = ""  # why it earned nothing, or ""


def move_epoch(session: Session, record: OracleEpoch, state: EpochState) -> None:
    """Moves an epoch's record to `state`, in one commit; a move EPOCH_MOVES does not name is
    refused (`core.states.IllegalMove`) before anything changes."""
    EPOCH_MOVES.check(record.epoch, record.state, state)
    record.state = state
    record.updated_at = time.time()
    session.add(record)
    session.commit()
