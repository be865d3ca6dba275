"""A site's serving leases (docs/architecture.md §12): a buyer's model on Ray Serve in a lease,
reached through the site, paid by receipts.

A buyer with a deposit for the provider in the serving escrow sends a `ServeOrder`
(`compute.serve_order`; signed, as every lease request is): the model (a built-in one and its
seed, or a checkpoint pinned by its sha256 on the data plane), its replicas and their
resources, the price per request or per generated token, and when the lease ends. The site
plans it as any lease (`LeasePlan`, the checkpoint fetched and checked by the launcher before
the work starts) and runs the `serve` kind (`compute.runners.serve`) in the lease's sandbox,
on a node of the head's machine: the lease's ingress listens on a Unix socket in its work
directory, which only the site reaches.

Every call (`forward`) carries the buyer's receipt. The receipt book (`provider.receipts`)
takes it before anything is forwarded, and charges it once the answer is ready: the price per
request, or the completion's tokens at the price per token (never more than the receipt's
amount, so a text buyer signs for its `max_tokens`). A request the lease refused (a malformed
body) or the site failed is charged nothing. A `Redeemer` sends each buyer's latest voucher to
the escrow from time to time, and at once when the buyer starts to thaw its deposit."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from compute.errors import ComputeError, InvalidJob
from compute.jobs import ComputeJob
from compute.runners.params import ServeParams
from compute.serve_order import STAGED_CHECKPOINT, ServeOrder
from core.errors import Refused, Unavailable
from ledger.serving import Account, Voucher
from provider.agent import RayJobs, _submission
from provider.lease import untrusted
from provider.lease.launch import ray_job
from provider.lease.plan import LEASE_RAY_OVERHEAD_BYTES, Fetch, LeasePlan
from provider.receipts import ReceiptBook, VoucherDue

SERVING = "serving.json"  # the site's record of a serving lease, beside its plan
ROUTES = {"predict": "predict", "generate": "v1/completions"}
REPLICA_MEMORY_BYTES = 2**30  # what a replica may hold unless the order says more
SERVE_OVERHEAD_BYTES = 2**29  # Serve's controller and the ingress, beside the lease's Ray
SERVE_CPUS = 0.0  # Serve's controller and the ingress share the replicas' CPUs: a lease fits a node of one
MAX_BODY_BYTES = 1 << 20
MAX_ANSWER_BYTES = 16 << 20  # what the site reads of a lease's answer
POOL_SIZE = 64  # kept-alive connections to one lease's ingress
START_GRACE_S = 120.0  # the lease's wall clock: until ends_at, and this for Ray and Serve to start and stop
IDLE_S = 1800.0  # a serving lease nobody calls for this long is stopped (`--serving-idle`)
START_AGAIN_S = 30.0  # a lease the site finds dead when it starts is started again with more than this left
NAME_PREFIX = "serve-"

log = logging.getLogger(__name__)


def plan_serving(order: ServeOrder, number: int, provider: str, now: float) -> LeasePlan:
    """The lease that serves `order`: the replicas' CPUs and GPUs (and Serve's own), their memory,
    until ends_at; a pinned checkpoint is fetched and checked before it starts."""
    fetch: tuple[Fetch, ...] = ()
    checkpoint = ""
    if order.checkpoint:
        target = STAGED_CHECKPOINT
        leaf = order.checkpoint.uri.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
        path = f"{target}/{leaf}" if Path(leaf).suffix else target
        fetch = (Fetch(order.checkpoint.uri, order.checkpoint.sha256, target, "checkpoint", path),)
        checkpoint = path
    params = order.params(checkpoint)
    wall, units = _limits(order, now)
    job = ComputeJob(job_id=f"{NAME_PREFIX}{number}", provider=provider, params=params, seed=order.seed,
                     use_gpu=order.replica_gpus > 0, timeout_s=wall)
    memory = int(order.replicas * order.memory_gb * 2**30) + LEASE_RAY_OVERHEAD_BYTES + SERVE_OVERHEAD_BYTES
    return LeasePlan(job_id=0, number=number, job=job, cpus=order.replicas * order.replica_cpus + SERVE_CPUS,
                     gpus=order.replicas * order.replica_gpus, memory_bytes=memory, wall_seconds=wall,
                     max_units=units, fetch=fetch)


def _limits(order: ServeOrder, now: float) -> tuple[float, int]:
    """An attempt's wall clock, until ends_at and the grace for Ray and Serve, and the units its
    devices may use in that time."""
    wall = order.ends_at - now + START_GRACE_S
    gpus = order.replicas * order.replica_gpus
    rate = max(gpus if gpus > 0 else order.replicas * order.replica_cpus + SERVE_CPUS, 0.001)
    return wall, math.ceil(wall * rate) + 1


@dataclass(frozen=True)
class ServingLease:
    """The site's record of one serving lease."""

    lease: str
    buyer: str
    order: ServeOrder
    started_at: float

    def as_dict(self) -> dict[str, Any]:
        return {"lease": self.lease, "buyer": self.buyer, "started_at": self.started_at,
                "order": self.order.as_dict()}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ServingLease:
        return cls(raw["lease"], raw["buyer"], ServeOrder.parse(raw["order"]), raw["started_at"])


class LeaseHost(Protocol):
    """What serving leases need of the site they run on (`provider.agent.Agent`)."""

    provider: str
    leases: Path  # the directory of every lease, a serving lease's beside the jobs'
    hidden: tuple[str, ...]  # what no lease may see
    jobs: RayJobs  # the site's Ray job client
    lock: threading.Lock  # held while a lease is numbered, planned and submitted

    def next_number(self) -> int: ...


class ServingLeases:
    """A site's serving leases: deployed for buyers with a deposit, called with receipts."""

    def __init__(self, site: LeaseHost, book: ReceiptBook, home: Path, idle_s: float = IDLE_S) -> None:
        self.site = site
        self.book = book
        self.home = home
        self.idle_s = idle_s  # a lease called by nobody for this long is stopped: its replicas go back
        self._last_call: dict[str, float] = {}  # lease → when a call was last accepted for it
        self._stopped: set[str] = set()  # leases stopped (each with a `stopped` file saying why)
        self._lock = threading.Lock()
        self._records: dict[str, ServingLease] = {}
        # lease → idle connections to its ingress
        self._pools: dict[str, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}

    # ── the lease ────────────────────────────────────────────────────────────
    def deploy(self, buyer: str, body: bytes, now: float | None = None) -> dict[str, Any]:
        now = time.time() if now is None else now
        try:
            order = ServeOrder.read(body, now)
        except InvalidJob as exc:  # the buyer's to fix: 400
            raise InvalidJob(f"The serving order is refused: {exc}", exc.field) from None
        with self.site.lock:
            number = self.site.next_number()
            name = f"{NAME_PREFIX}{number}"
            directory = self.site.leases / name
            plan = plan_serving(order, number, self.site.provider, now)
            plan = plan.but(hidden=tuple(plan.hidden) + self.site.hidden, verdict_key=_token())
            plan.write(directory)
            record = ServingLease(name, buyer, order, now)
            (directory / SERVING).write_text(json.dumps(record.as_dict()))
            self._submit(directory, plan)
        log.info("serving lease %s started for %s: %s until %.0f", name, buyer, order.model, order.ends_at)
        with self._lock:
            self._records[name] = record
        return self.info(name)

    def _submit(self, directory: Path, plan: LeasePlan) -> None:
        """As the site submits any lease, held to a node of this machine, whose Unix sockets the site
        reaches."""
        import ray

        job = ray_job(plan, directory.name)
        job["entrypoint_resources"] = {f"node:{ray.util.get_node_ip_address()}": 0.001}
        self.site.jobs.submit_job(submission_id=_submission(directory, plan.attempt),
                                  metadata={"swarm_serving": directory.name}, **job)

    def resume(self, now: float | None = None) -> list[str]:
        """Starts again every serving lease this site's Ray no longer runs (the site and its
        cluster died, or the machine restarted) that its buyer has not stopped and that has more
        than START_AGAIN_S to serve: a new attempt, its limits counted from now. Returns their names."""
        now = time.time() if now is None else now
        resumed = []
        for path in sorted(self.site.leases.glob(f"{NAME_PREFIX}*/{SERVING}")):
            directory = path.parent
            try:
                record = ServingLease.from_dict(json.loads(path.read_text()))
                plan = LeasePlan.read(directory)
            except (OSError, ValueError, KeyError, TypeError, InvalidJob):
                continue  # not a record this site wrote whole
            if (directory / "stopped").exists() or record.order.ends_at - now <= START_AGAIN_S:
                continue
            try:
                self.site.jobs.get_job_status(_submission(directory, plan.attempt))
                continue  # this cluster runs it, or ran it to its end
            except RuntimeError:
                pass  # unknown here: the cluster that ran it is gone
            wall, units = _limits(record.order, now)
            plan = plan.but(attempt=plan.attempt + 1, wall_seconds=wall, max_units=units,
                            job=replace(plan.job, timeout_s=wall))
            with self.site.lock:
                untrusted.clear(directory / "work", ServeParams.socket)  # the last attempt's, dead
                plan.write(directory)
                self._submit(directory, plan)
            log.info("serving lease %s started again (attempt %s): its cluster no longer ran it",
                     directory.name, plan.attempt)
            resumed.append(directory.name)
        return resumed

    def record(self, lease: str) -> ServingLease:
        with self._lock:
            found = self._records.get(lease)
        if found is None:
            path = self.site.leases / lease / SERVING
            if not lease.startswith(NAME_PREFIX) or "/" in lease or not path.is_file():
                raise Refused(404, f"This site has no serving lease {lease!r}.")
            found = ServingLease.from_dict(json.loads(path.read_text()))
            with self._lock:
                self._records[lease] = found
                if (path.parent / "stopped").exists():
                    self._stopped.add(lease)
        return found

    def state(self, lease: str) -> str:
        """pending, serving, ended or failed."""
        from ray.job_submission import JobStatus

        directory = self.site.leases / lease
        plan = LeasePlan.read(directory)
        try:
            status = self.site.jobs.get_job_status(_submission(directory, plan.attempt))
        except RuntimeError:
            return "ended"  # run by a cluster gone since, and not started again (resume)
        if status == JobStatus.PENDING:
            return "pending"
        if status == JobStatus.RUNNING:
            return "serving" if self._socket(lease).exists() else "pending"
        if status in (JobStatus.SUCCEEDED, JobStatus.STOPPED):
            return "ended"
        return "failed"

    def info(self, lease: str) -> dict[str, Any]:
        """Public: what a lease serves, at what price, until when, and whether it answers now."""
        record = self.record(lease)
        order = record.order
        return {"lease": lease, "buyer": record.buyer, "provider": self.site.provider,
                "state": self.state(lease),
                "task": order.task, "route": f"/v1/serving/{lease}/{ROUTES[order.task]}",
                "model": order.model, "sha256": order.sha256, "seed": order.seed,
                "max_tokens": order.max_tokens, "price_per_request": str(order.price_per_request),
                "price_per_token": str(order.price_per_token),
                "replicas": order.replicas, "ends_at": order.ends_at, "idle_stop_s": self.idle_s,
                "stopped": _read_small(self.site.leases / lease / "stopped") or None}

    def leases(self) -> list[dict[str, Any]]:
        names = sorted(p.parent.name for p in self.site.leases.glob(f"{NAME_PREFIX}*/{SERVING}"))
        return [self.info(name) for name in names]

    def stop(self, buyer: str, lease: str) -> dict[str, Any]:
        record = self.record(lease)
        if record.buyer.lower() != buyer.lower():
            raise Refused(403, f"{buyer} did not deploy serving lease {lease}; only its buyer stops it.")
        self._stop(lease, "its buyer stopped it")
        return self.info(lease)

    def _stop(self, lease: str, why: str) -> None:
        directory = self.site.leases / lease
        (directory / "stopped").write_text(why)
        with self._lock:
            self._stopped.add(lease)
        with contextlib.suppress(RuntimeError):  # it had ended
            self.site.jobs.stop_job(_submission(directory, LeasePlan.read(directory).attempt))
        log.info("serving lease %s stopped: %s", lease, why)

    def stop_idle(self, now: float | None = None) -> list[str]:
        """Stops every serving lease nobody has called for `idle_s`, counted from its last accepted
        call or the first time this sweep saw it serve: a lease paid per request holds its replicas'
        CPUs and GPUs only while it is used. Returns their names."""
        now = time.time() if now is None else now
        stopped = []
        for path in sorted(self.site.leases.glob(f"{NAME_PREFIX}*/{SERVING}")):
            lease = path.parent.name
            if (path.parent / "stopped").exists():
                continue
            try:
                record = self.record(lease)
            except (Refused, OSError, ValueError, KeyError, TypeError):
                continue  # not a record this site wrote whole
            if record.order.ends_at <= now or self.state(lease) != "serving":
                continue  # it ends by itself, or has yet to serve
            last = self._last_call.setdefault(lease, now)
            if now - last >= self.idle_s:
                self._stop(lease, f"no call for {self.idle_s:.0f} s")
                stopped.append(lease)
        return stopped

    def _socket(self, lease: str) -> Path:
        return self.site.leases / lease / "work" / ServeParams.socket

    # ── a call ───────────────────────────────────────────────────────────────
    async def forward(self, lease: str, route: str, body: bytes,
                      receipt: str | None) -> tuple[int, bytes, dict[str, str]]:
        """Takes the call's receipt, forwards the call to the lease and charges it; returns the lease's
        status and body, and the site's headers (Swarm-Charged: what the call cost)."""
        record = self.record(lease)
        order = record.order
        if route != ROUTES[order.task]:
            raise Refused(404, f"Serving lease {lease} answers POST "
                               f"/v1/serving/{lease}/{ROUTES[order.task]}.")
        if time.time() >= order.ends_at or lease in self._stopped:
            why = _read_small(self.site.leases / lease / "stopped")
            raise Refused(410, f"Serving lease {lease} has ended{f' ({why})' if why else ''}; deploy another "
                               "to call the model again.")
        if len(body) > MAX_BODY_BYTES:
            raise Refused(413, f"The body is over {MAX_BODY_BYTES} bytes.")
        least = order.price
        if order.price_per_token:
            least = order.price_per_token * _max_tokens(body, order.max_tokens)
        try:
            ticket = self.book.accept(receipt, lease, least)
            self._last_call[lease] = time.time()
        except Refused as exc:
            headers = {"Swarm-Voucher-Due": "1"} if isinstance(exc, VoucherDue) else {}
            return exc.status, json.dumps({"error": str(exc)}).encode(), headers
        try:
            status, answer = await self._post(lease, route, body)
        except Exception as exc:  # noqa: BLE001 — the lease is not answering: nothing is charged
            self.book.charge(ticket, 0)
            raise Unavailable(f"Serving lease {lease} is not answering now ({type(exc).__name__}); nothing "
                              "was charged, call again shortly.") from None
        cost = 0
        if status == 200:
            cost = order.price_per_request or order.price_per_token * _completion_tokens(answer)
        charged = self.book.charge(ticket, cost)
        return status, answer, {"Swarm-Charged": str(charged), "Swarm-Buyer": ticket.buyer}

    async def _post(self, lease: str, route: str, body: bytes) -> tuple[int, bytes]:
        """One HTTP/1.1 POST to the lease's ingress on its Unix socket, on a kept-alive connection
        of this lease's pool (made again once if the ingress closed it)."""
        pool = self._pools.setdefault(lease, [])
        request = (f"POST /{route} HTTP/1.1\r\nhost: lease\r\ncontent-type: application/json\r\n"
                   f"content-length: {len(body)}\r\n\r\n").encode() + body
        for attempt in range(2):
            if pool:
                reader, writer = pool.pop()
            else:
                reader, writer = await asyncio.open_unix_connection(str(_checked(self._socket(lease))),
                                                                    limit=MAX_ANSWER_BYTES)
            try:
                writer.write(request)
                status, answer, keep = await _read_response(reader)
            except (OSError, EOFError, asyncio.IncompleteReadError, ValueError):
                writer.close()
                if attempt == 1:
                    raise
                continue
            if keep and len(pool) < POOL_SIZE:
                pool.append((reader, writer))
            else:
                writer.close()
            return status, answer
        raise AssertionError("unreachable")


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """An HTTP/1.1 response with a content-length, as the lease's ingress (uvicorn) sends it: its
    status, its body, and whether the connection stays open."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    fields = (line.partition(":") for line in lines[1:] if line)
    headers = {name.strip().lower(): value.strip() for name, _, value in fields}
    length = int(headers.get("content-length", "-1"))
    if not 0 <= length <= MAX_ANSWER_BYTES:
        raise ValueError("the lease's answer has no length the site reads")
    answer = await reader.readexactly(length)
    return status, answer, headers.get("connection", "").lower() != "close"


def _checked(socket: Path) -> Path:
    """The lease's socket, refused unless it is a socket and no link: a lease could leave anything at
    that path."""
    import os
    import stat

    try:
        mode = os.lstat(socket).st_mode
    except FileNotFoundError:
        raise ComputeError("the lease's model is not listening yet") from None
    if not stat.S_ISSOCK(mode):
        raise ComputeError("the lease left something other than its socket where its model listens")
    return socket


def _read_small(path: Path) -> str:
    """A note the site left itself (why a lease stopped), or "" when there is none."""
    try:
        return path.read_text()[:200]
    except (OSError, UnicodeDecodeError):
        return ""


def _max_tokens(body: bytes, cap: int) -> int:
    try:
        value = json.loads(body).get("max_tokens", 16)
    except (ValueError, AttributeError):
        return 1
    return value if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= cap else 1


def _completion_tokens(answer: bytes) -> int:
    try:
        tokens = json.loads(answer)["usage"]["completion_tokens"]
    except (ValueError, KeyError, TypeError):
        return 0
    return tokens if isinstance(tokens, int) and tokens >= 0 else 0


def _token() -> str:
    import secrets

    return secrets.token_hex(16)


class Redeemer:
    """Sends each buyer's latest voucher to the escrow: when what it adds reaches `least`, when
    `every_s` has passed since the buyer's last redemption, and at once when the buyer is thawing
    its deposit (whatever it signed stays redeemable only until it withdraws)."""

    def __init__(self, book: ReceiptBook, redeem: Callable[[Voucher], object],
                 account: Callable[[str], Account], least: int = 0, every_s: float = 300.0) -> None:
        self.book = book
        self._redeem = redeem  # sends the voucher to the escrow (what it returns is not read)
        self._account = account  # a buyer's account in the escrow, for this provider
        self.least = least
        self.every_s = every_s
        self._last: dict[str, float] = {}
        self._stop = threading.Event()
        self.redeemed: list[tuple[str, int]] = []  # (buyer, paid), for the operator's log

    def once(self, force: bool = False) -> list[tuple[str, int]]:
        """One round; returns (buyer, paid) for each voucher redeemed."""
        paid = []
        for voucher, _recorded in self.book.vouchers():
            account = self._account(voucher.buyer)
            owed = voucher.cumulative - account.redeemed
            if owed <= 0:
                self.book.redeemed(voucher.buyer, account.redeemed)
                continue
            last = self._last.get(voucher.buyer)  # none since the site started: redeem what is owed
            due = force or account.thawing > 0 or owed >= self.least or last is None or \
                time.monotonic() - last >= self.every_s
            if not due or account.balance == 0:
                continue
            before = account.redeemed
            self._redeem(voucher)
            after = self._account(voucher.buyer).redeemed
            self.book.redeemed(voucher.buyer, after)
            self._last[voucher.buyer] = time.monotonic()
            paid.append((voucher.buyer, after - before))
        self.redeemed += paid
        return paid

    def run(self, period_s: float = 5.0) -> None:
        """Rounds every `period_s` until `stop`; a failed round is logged and tried again."""
        while not self._stop.wait(period_s):
            try:
                self.once()
            except Exception as exc:  # noqa: BLE001 — the chain may be down; the next round tries again
                log.warning("serving: redemption failed (%s); trying again in %.0f s", exc, period_s)

    def stop(self) -> None:
        self._stop.set()
