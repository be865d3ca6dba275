"""A site serves a signed request only as the chain allows: each test is a request someone
could send, on a real anvil, and what the site answers. And it signs a lease's outcome only for
the assignment it agreed to run: its own provider, at its price or more."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from anvil import dev_account
from core.errors import Refused
from ledger import governance, jobs, stake
from ledger.client import Swarm
from ledger.deploy import devnet_committee_keys
from ledger.results import JobTerms
from ledger.specs import store_spec
from ledger.units import ONE
from provider.auth import NonceBook, WontSign, authorize
from provider.authority import ChainAuthority, terms_to_sign
from provider.site import asking_price
from wire.request import MAX_VALIDITY_S, SiteRequest, body_hash, sign_request

MATCHER, PROVIDER, OTHER_PROVIDER, BUYER, STRANGER = (dev_account(i) for i in (0, 1, 2, 4, 6))
SPEC = b"\x5e" * 32
PRICE = 10**14  # a tenth of the highest floor the market allows, so a test can raise the floor over it


@pytest.fixture
def site(swarm: Swarm, tmp_path: Path):
    """A provider with an assigned job, and the site's means to authorize requests."""
    for account in (PROVIDER, OTHER_PROVIDER):
        sender = swarm.sender(account.key)
        stake.register(swarm, sender, secrets.token_bytes(32), 1)
        stake.stake(swarm, sender, 1_000 * ONE)
    deadline = swarm.chain.timestamp() + 3_600
    job_id, _ = jobs.post_job(swarm, swarm.sender(BUYER.key), SPEC, PRICE, 100, deadline)
    jobs.assign_job(swarm, swarm.sender(MATCHER.key), job_id, PROVIDER.address, PRICE)
    nonces = NonceBook(tmp_path / "nonces.db")
    yield {"swarm": swarm, "job": job_id, "authority": ChainAuthority(swarm), "nonces": nonces}
    nonces.close()


def _ask(
    site,
    key: bytes,
    action: str,
    *,
    job: int | None = None,
    for_site: str = PROVIDER.address,
    spec: bytes | None = SPEC,
    nonce: int | None = None,
    expires_in: int = 60,
    tamper: bool = False,
) -> str:
    swarm = site["swarm"]
    now = swarm.chain.timestamp()
    request = SiteRequest(action, for_site, site["job"] if job is None else job, body_hash(b"{}"),
                          secrets.randbits(64) if nonce is None else nonce, now + expires_in)
    signature = sign_request(request, key, swarm.chain.chain_id, swarm.market.address)
    if tamper:
        request = SiteRequest(
            action,
            for_site,
            request.job_id,
            body_hash(b'{"other": "body"}'),
            request.nonce,
            request.expires_at,
        )
    return authorize(request, signature, site=PROVIDER.address, chain_id=swarm.chain.chain_id,
                     market=swarm.market.address, authority=site["authority"], nonces=site["nonces"], now=now,
                     spec_hash=spec)


def _refused(status: int, match: str, *args, **kwargs) -> None:
    with pytest.raises(Refused, match=match) as refused:
        _ask(*args, **kwargs)
    assert refused.value.status == status


def test_the_matcher_starts_a_lease_for_a_job_the_chain_assigned_here(site) -> None:
    assert _ask(site, MATCHER.key, "lease.start") == MATCHER.address


def test_only_the_matcher_may_start_a_lease(site) -> None:
    for who in (BUYER, STRANGER, PROVIDER):
        _refused(403, "not the market's matcher", site, who.key, "lease.start")


def test_a_lease_for_a_job_assigned_elsewhere_or_with_another_spec_is_refused(site) -> None:
    _refused(403, "not for this site|is for the site of", site, MATCHER.key, "lease.start",
             for_site=OTHER_PROVIDER.address)
    other_job, _ = jobs.post_job(site["swarm"], site["swarm"].sender(BUYER.key), SPEC, 10**15, 100,
                                 site["swarm"].chain.timestamp() + 3_600)
    jobs.assign_job(
        site["swarm"], site["swarm"].sender(MATCHER.key), other_job, OTHER_PROVIDER.address, 10**15
    )
    _refused(403, "not assigned to this site's provider", site, MATCHER.key, "lease.start", job=other_job)
    _refused(403, "does not hash to the one job", site, MATCHER.key, "lease.start", spec=b"\x00" * 32)
    _refused(404, "does not exist on chain", site, MATCHER.key, "lease.start", job=10_000)


def test_a_lease_is_started_only_while_the_job_is_assigned(site) -> None:
    jobs.fail_job(site["swarm"], site["swarm"].sender(MATCHER.key), site["job"], "provider-lost", 0)
    _refused(409, "is failed on chain", site, MATCHER.key, "lease.start")


def test_the_buyer_and_the_matcher_read_a_lease_and_nobody_else(site) -> None:
    for action in ("lease.status", "lease.logs", "lease.result"):
        assert _ask(site, BUYER.key, action) == BUYER.address
        assert _ask(site, MATCHER.key, action) == MATCHER.address
        _refused(403, "neither the matcher nor the buyer", site, STRANGER.key, action)
    _refused(403, "not the market's matcher", site, BUYER.key, "lease.stop")


def test_probes_and_challenges_come_only_from_the_oracle_committee(site) -> None:
    member = devnet_committee_keys()[0]
    for action in ("probe", "challenge"):
        assert _ask(site, member, action, job=0)
        for who in (MATCHER, BUYER, STRANGER):
            _refused(403, "not on the oracle committee", site, who.key, action, job=0)


def test_a_request_is_served_once(site) -> None:
    _ask(site, BUYER.key, "lease.status", nonce=42)
    _refused(409, "was used already", site, BUYER.key, "lease.status", nonce=42)
    assert _ask(site, MATCHER.key, "lease.status", nonce=42), "nonces are per signer"


def test_a_replay_is_refused_after_the_site_restarts(site, tmp_path: Path) -> None:
    _ask(site, BUYER.key, "lease.status", nonce=7)
    site["nonces"].close()
    site["nonces"] = NonceBook(tmp_path / "nonces.db")
    _refused(409, "was used already", site, BUYER.key, "lease.status", nonce=7)


def test_expired_long_lived_tampered_and_unknown_requests_are_refused(site) -> None:
    _refused(401, "expired", site, BUYER.key, "lease.status", expires_in=-1)
    _refused(
        401,
        f"longer than {MAX_VALIDITY_S} s",
        site,
        BUYER.key,
        "lease.status",
        expires_in=MAX_VALIDITY_S + 60,
    )
    # A signature over another body recovers another address, which has no role.
    _refused(403, "neither the matcher nor the buyer", site, BUYER.key, "lease.status", tamper=True)
    _refused(400, "Unknown action", site, MATCHER.key, "lease.delete")
    swarm = site["swarm"]
    request = SiteRequest("lease.status", PROVIDER.address, site["job"], body_hash(b"{}"), 1,
                          swarm.chain.timestamp() + 60)
    with pytest.raises(Refused, match="signature is not valid") as bad:
        authorize(request, b"\x01" * 10, site=PROVIDER.address, chain_id=swarm.chain.chain_id,
                  market=swarm.market.address, authority=site["authority"], nonces=site["nonces"],
                  now=swarm.chain.timestamp())
    assert bad.value.status == 401


# ── what a site signs ─────────────────────────────────────────────────────────────────
def test_a_site_signs_under_the_provider_and_price_the_chain_holds(site) -> None:
    swarm = site["swarm"]
    terms = terms_to_sign(swarm, PROVIDER.address, site["job"], agreed_price=PRICE)
    assert terms == JobTerms(site["job"], PROVIDER.address, PRICE)
    assert site["authority"].job(site["job"]).price_per_unit == PRICE, "what a lease's start records"


def test_a_site_refuses_to_sign_for_a_job_the_chain_shows_elsewhere_or_cheaper(site) -> None:
    swarm, job_id = site["swarm"], site["job"]
    cheaper = rf"^Job {job_id} is assigned at {PRICE} wei per unit on chain, under the {2 * PRICE} wei "
    with pytest.raises(WontSign, match=cheaper + "the site agreed to run it for, so the site signs nothing"):
        terms_to_sign(swarm, PROVIDER.address, job_id, agreed_price=2 * PRICE)
    matcher = swarm.sender(MATCHER.key)
    jobs.reassign_job(swarm, matcher, job_id, OTHER_PROVIDER.address, PRICE, "provider-lost")
    elsewhere = rf"^Job {job_id} is assigned to {OTHER_PROVIDER.address} on chain, not to this site's "
    with pytest.raises(WontSign, match=elsewhere + rf"provider {PROVIDER.address}, so the site signs"):
        terms_to_sign(swarm, PROVIDER.address, job_id, agreed_price=PRICE)


def test_with_no_agreed_price_a_site_refuses_a_price_under_the_markets_floor(site) -> None:
    swarm, job_id = site["swarm"], site["job"]
    assert terms_to_sign(swarm, PROVIDER.address, job_id).price_per_unit == PRICE
    raise_floor = governance.admin_call(swarm, "JobMarket", "setJobLimits", 30 * 86_400, 2 * PRICE)
    governance.enact(swarm, swarm.sender(MATCHER.key), raise_floor)
    with pytest.raises(WontSign, match=f"under the {2 * PRICE} wei the site agreed"):
        terms_to_sign(swarm, PROVIDER.address, job_id)


def test_a_sites_asking_price_is_its_registered_specs(site, swarm: Swarm, tmp_path: Path) -> None:
    assert asking_price(swarm, tmp_path, PROVIDER.address) is None, "a spec not stored here: no known price"
    asking = {"gpu_model": "cpu", "gpus": 1, "vram_gb": 1, "price_per_unit": str(3 * PRICE)}
    stake.update_spec(swarm, swarm.sender(PROVIDER.key), store_spec(tmp_path, asking), 1)
    assert asking_price(swarm, tmp_path, PROVIDER.address) == 3 * PRICE
