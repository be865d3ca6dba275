"""The site's API answers each error by its class (`core.errors`, `provider.api.errors`): a
buyer's spec the site cannot run is 400, a refusal its own status, a site whose Ray does not
answer 503, a node that broke its promise 500, and a bug 500 with a sentence that tells nothing
of it, its traceback in the site's log; the routes and a model's calls in front of them alike.

The site is the real app over pinned TLS, authorized and planned on the session's anvil, with
a real `Agent` whose Ray is not up: its dashboard's address answers nothing, which is how each
503 comes. Only a challenge's commit is staged (`LateNode`): computing one takes a Ray worker.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from eth_utils import keccak

from anvil import dev_account
from anvil.node import free_port
from compute.errors import ProviderFault
from compute.order import job_namespace
from compute.serve_order import ServeOrder
from core.errors import Refused
from ledger import jobs, serving, stake
from ledger.client import Swarm
from ledger.deploy import devnet_committee_keys
from ledger.serving import DigestSigner
from ledger.specs import canonical
from ledger.units import ONE
from market.spec import validate_spec
from provider.agent import Agent
from provider.api import SiteParts, listen, make_app
from provider.auth import NonceBook
from provider.authority import ChainAuthority
from provider.identity import make_identity
from provider.lease import PLAN
from provider.receipts import ReceiptBook
from provider.serving import MAX_BODY_BYTES, SERVING, ServingLease, ServingLeases
from provider.site import ChainAuthorizer, ChainPlanner, ChainSigner
from tests.programs import program_spec
from wire.client import SiteAddress, SiteClient, pinned_request

pytestmark = pytest.mark.light

MATCHER, PROVIDER, BUYER, STRANGER = (dev_account(i) for i in (0, 1, 4, 6))
PRICE = 10**12  # wei per unit, and per call: the market's floor
NOT_UP = "The site's Ray cluster does not answer now; ask again shortly."


class LateNode(Agent):
    """The real site, whose node does not compute a challenge's commit in time: what the agent
    raises when Ray's worker misses the oracle's timeout, staged without Ray."""

    def challenge_commit(self, ticket: str, seed: int, timeout_s: float) -> dict:
        raise ProviderFault(self.provider, f"The challenge was not computed within {timeout_s:g} s.")


@dataclass
class Served:
    swarm: Swarm
    site: LateNode
    book: ReceiptBook
    address: SiteAddress
    store: Path

    def client(self, key: bytes = MATCHER.key) -> SiteClient:
        return SiteClient(self.address, self.swarm.sender(key).sign_typed_data, self.swarm.chain.chain_id,
                          self.swarm.market.address)

    def raw(self, method: str, path: str, body: bytes = b"", **headers: str) -> tuple[int, str]:
        status, payload, _ = pinned_request(self.address, method, path, body, headers)
        return status, json.loads(payload)["error"]


@pytest.fixture
def served(swarm: Swarm, tmp_path: Path) -> Iterator[Served]:
    """A staked provider's site, its leases and its serving leases, served from a thread."""
    import uvicorn

    sender = swarm.sender(PROVIDER.key)
    stake.register(swarm, sender, secrets.token_bytes(32), 1)
    stake.stake(swarm, sender, 1_000 * ONE)
    chain_id, market = swarm.chain.chain_id, swarm.market.address
    home, authority = tmp_path / "home", ChainAuthority(swarm)
    planner = ChainPlanner(swarm, home, PROVIDER.address, authority, job_namespace(chain_id, market))
    signer = ChainSigner(swarm, sender)
    nowhere = f"http://127.0.0.1:{free_port()}"  # the site's Ray dashboard, not up
    site = LateNode(home / "site", PROVIDER.address, nowhere, planner, signer.result,
                    failure_signer=signer.failure)
    book = ReceiptBook(home / "site" / "serving" / "receipts.db", serving.domain_of(swarm), PROVIDER.address,
                       10**18, lambda buyer: serving.account(swarm, buyer, PROVIDER.address))
    nonces = NonceBook(home / "site" / "nonces.db")
    authorize = ChainAuthorizer(PROVIDER.address, chain_id, market, authority, nonces)
    app = make_app(SiteParts(PROVIDER.address, chain_id, market, site, authorize,
                             serving=ServingLeases(site, book, home)))
    identity = make_identity(home / "site", "127.0.0.1")
    listener = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, ssl_certfile=str(identity.certificate),
                                           ssl_keyfile=str(identity.key), log_config=None,
                                           access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    address = SiteAddress(PROVIDER.address, f"https://127.0.0.1:{listener.getsockname()[1]}",
                          identity.fingerprint)
    yield Served(swarm, site, book, address, tmp_path / "store")
    server.should_exit = True
    thread.join(timeout=10)
    book.close()
    nonces.close()


def _assigned(served: Served, spec: bytes) -> int:
    """A job posted by the buyer with `spec` and assigned to the site's provider."""
    swarm = served.swarm
    job_id, _ = jobs.post_job(swarm, swarm.sender(BUYER.key), keccak(spec), PRICE, 100,
                              swarm.chain.timestamp() + 3_600)
    jobs.assign_job(swarm, swarm.sender(MATCHER.key), job_id, PROVIDER.address, PRICE)
    return job_id


def _runnable(served: Served) -> bytes:
    """A spec the site plans: a buyer's program, as `swarm job post` pins and posts it."""
    return canonical(validate_spec(program_spec(served.store, "print('ran')")).canonical())


def _refused(call, *args, **kwargs) -> Refused:
    with pytest.raises(Refused) as refused:
        call(*args, **kwargs)
    assert "\n" not in str(refused.value), "one sentence"
    return refused.value


def _planned(served: Served, job_id: int) -> list[Path]:
    return list(served.site.leases.glob(f"{job_id}-*/{PLAN}"))


def test_a_spec_the_site_cannot_run_is_the_buyers_400_never_the_sites_500(served: Served) -> None:
    """What the planner refuses is the buyer's InvalidJob: the market fails the job as the
    buyer's, where a 500 would have it count the site as failing and slash it."""
    job_id = _assigned(served, b'{"kind": "nope"}')
    refused = _refused(served.client().start_lease, job_id, b'{"kind": "nope"}')
    assert refused.status == 400
    assert str(refused).startswith(f"Job {job_id}: the job's spec cannot be read: kind must be one of ")
    assert _planned(served, job_id) == [], "nothing was planned"


def test_a_refusal_is_answered_with_its_own_status_and_sentence(served: Served) -> None:
    job_id = _assigned(served, _runnable(served))
    stranger = _refused(served.client(STRANGER.key).status, job_id)
    assert (stranger.status, str(stranger)) == (
        403, f"{STRANGER.address} is neither the matcher nor the buyer of job {job_id}.")
    none = _refused(served.client(BUYER.key).status, job_id)
    assert (none.status, str(none)) == (
        404, f"This site has no lease for job {job_id}; the market starts one when it is assigned.")
    assert served.raw("GET", f"/v1/leases/{job_id}") == (
        401, "The request is not signed: send Swarm-Nonce, Swarm-Expires and Swarm-Signature.")


def test_a_site_whose_ray_does_not_answer_is_503_and_plans_the_lease_again_next_time(served: Served) -> None:
    spec = _runnable(served)
    job_id = _assigned(served, spec)
    for _ in range(2):  # the first start planned nothing that stays: the second plans it again
        refused = _refused(served.client().start_lease, job_id, spec)
        assert (refused.status, str(refused)) == (503, NOT_UP)
        assert _planned(served, job_id) == [], "no plan left behind without its Ray job"
    assert (served.site.root / "lease-numbers").read_text() == "2"


def test_a_node_that_breaks_its_promise_is_the_providers_fault_500(served: Served) -> None:
    oracle = served.client(devnet_committee_keys()[0])
    refused = _refused(oracle.challenge_commit, "a ticket", 7, timeout_s=1.0)
    assert (refused.status, str(refused)) == (500, "The challenge was not computed within 1 s.")


def test_a_bug_is_500_in_a_sentence_that_tells_nothing_and_its_traceback_is_in_the_sites_log(
        served: Served, caplog: pytest.LogCaptureFixture) -> None:
    spec = _runnable(served)
    job_id = _assigned(served, spec)
    _refused(served.client().start_lease, job_id, spec)  # Ray is away: its directory stays, unplanned
    (directory,) = served.site.leases.glob(f"{job_id}-*")
    (directory / PLAN).write_text('{"the site\'s own record, broken": ')
    with caplog.at_level(logging.ERROR, logger="provider.api.errors"):
        refused = _refused(served.client(BUYER.key).status, job_id)
    assert (refused.status, str(refused)) == (
        500, f"The site failed to serve /v1/leases/{job_id}; its operator's log has the details.")
    (record,) = [r for r in caplog.records if r.name == "provider.api.errors"]
    assert record.exc_info is not None and isinstance(record.exc_info[1], json.JSONDecodeError)
    assert "Traceback" in caplog.text and "JSONDecodeError" in caplog.text


def test_a_request_the_api_cannot_read_is_answered_in_one_sentence(served: Served) -> None:
    assert served.raw("GET", "/v1/leases/seven") == (400, (
        "The request's path job_id is not valid: Input should be a valid integer, unable to parse string as "
        "an integer."))
    assert served.raw("POST", "/v1/leases/7", b"x" * (MAX_BODY_BYTES + 1)) == (
        413, f"The body is over {MAX_BODY_BYTES} bytes.")
    assert served.raw("GET", "/v1/nothing") == (404, "The site has no GET /v1/nothing (Not Found).")
    assert served.raw("DELETE", "/v1/info") == (405, "The site has no DELETE /v1/info (Method Not Allowed).")


def test_a_models_calls_in_front_of_the_app_are_answered_by_class_too(
        served: Served, caplog: pytest.LogCaptureFixture) -> None:
    swarm = served.swarm
    serving.deposit(swarm, swarm.sender(BUYER.key), PROVIDER.address, 1_000 * PRICE)
    order = ServeOrder.parse({"task": "predict", "model": "mlp", "replicas": 1, "min_replicas": 1,
                              "replica_cpus": 1.0, "replica_gpus": 0.0, "memory_gb": 1.0,
                              "max_batch_size": 16, "max_batch_wait_s": 0.005, "max_tokens": 16,
                              "ends_at": int(time.time()) + 600, "price_per_request": PRICE,
                              "price_per_token": 0, "seed": 7})
    for lease in ("serve-1", "serve-2"):
        (served.site.leases / lease).mkdir(parents=True)
    (served.site.leases / "serve-1" / SERVING).write_text(
        json.dumps(ServingLease("serve-1", BUYER.address, order, time.time()).as_dict()))
    (served.site.leases / "serve-2" / SERVING).write_text("{the site's own record, broken")

    def call(lease: str, body: bytes = b'{"input": [0.5]}') -> tuple[int, str]:
        receipt = serving.sign_receipt(DigestSigner(BUYER.key), served.book.domain, PROVIDER.address, PRICE)
        return served.raw("POST", f"/v1/serving/{lease}/predict", body, **{"Swarm-Receipt": receipt.header()})

    assert call("serve-9") == (404, "This site has no serving lease 'serve-9'.")
    assert call("serve-1") == (503, ("Serving lease serve-1 is not answering now (ComputeError); nothing was "
                                     "charged, call again shortly."))
    assert served.book.owed(BUYER.address) == {"receipts": 0, "voucher": 0}, "nothing charged"
    assert call("serve-1", b"x" * (MAX_BODY_BYTES + 1)) == (413, f"The body is over {MAX_BODY_BYTES} bytes.")
    with caplog.at_level(logging.ERROR, logger="provider.api.errors"):
        assert call("serve-2") == (500, (
            "The site failed to serve /v1/serving/serve-2/predict; its operator's log has the details."))
    (record,) = [r for r in caplog.records if r.name == "provider.api.errors"]
    assert record.exc_info is not None and isinstance(record.exc_info[1], json.JSONDecodeError)
