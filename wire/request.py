"""A request to a provider's site, as its caller signs it and the site checks it (docs/architecture.md §4).

A request names its action, the site it is for (the provider's address), the job, the hash of
its body, a nonce and an expiry, as EIP-712 typed data in the domain of one deployment (its
chain and JobMarket): it cannot be sent to another site, another chain or another deployment,
nor sent twice, nor kept for later. Who may ask for which action is the site's to decide, from
the chain (`provider.auth`)."""

from __future__ import annotations

from dataclasses import dataclass

DOMAIN_NAME = "SwarmSite"
DOMAIN_VERSION = "1"
MAX_VALIDITY_S = 300  # the longest a signed request may live: a replay window no longer than this
LEASE_ACTIONS = ("lease.start", "lease.status", "lease.logs", "lease.result", "lease.stop")
ORACLE_ACTIONS = ("probe", "challenge")
SERVE_ACTIONS = ("serve.deploy", "serve.stop")
ACTIONS = LEASE_ACTIONS + ORACLE_ACTIONS + SERVE_ACTIONS

REQUEST_FIELDS = [
    ("action", "string"), ("site", "address"), ("jobId", "uint256"), ("bodyHash", "bytes32"),
    ("nonce", "uint256"), ("expiresAt", "uint64"),
]


@dataclass(frozen=True)
class SiteRequest:
    action: str
    site: str  # the provider whose site this is for
    job_id: int  # 0 for probes and challenges
    body_hash: bytes  # keccak256 of the request's body
    nonce: int
    expires_at: int  # unix seconds

    def typed_data(self, chain_id: int, market: str) -> dict:
        return {
            "types": {
                "EIP712Domain": [
                    {"name": "name", "type": "string"},
                    {"name": "version", "type": "string"},
                    {"name": "chainId", "type": "uint256"},
                    {"name": "verifyingContract", "type": "address"},
                ],
                "SiteRequest": [{"name": n, "type": t} for n, t in REQUEST_FIELDS],
            },
            "primaryType": "SiteRequest",
            "domain": {
                "name": DOMAIN_NAME,
                "version": DOMAIN_VERSION,
                "chainId": chain_id,
                "verifyingContract": market,
            },
            "message": {
                "action": self.action,
                "site": self.site,
                "jobId": self.job_id,
                "bodyHash": self.body_hash,
                "nonce": self.nonce,
                "expiresAt": self.expires_at,
            },
        }


def sign_request(request: SiteRequest, key: bytes, chain_id: int, market: str) -> bytes:
    from eth_account import Account

    return bytes(
        Account.from_key(key).sign_typed_data(full_message=request.typed_data(chain_id, market)).signature
    )


def body_hash(body: bytes) -> bytes:
    from eth_utils import keccak

    return keccak(body)
