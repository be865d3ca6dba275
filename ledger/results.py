"""A provider's word on a job's result: the EIP-712 `JobResult` it signs, which JobMarket's
completeJob checks, so the matcher can submit a result but never make one up.

The signed struct names the provider and the price the job is assigned at, so a signature is
good only for the assignment it was made under: not for a job reassigned to another provider,
nor at another price."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledger.abi import encode as abi_encode
from ledger.abi import keccak256 as keccak
from ledger.eip712 import domain, typed_message
from ledger.errors import InvalidInput

DOMAIN_NAME = "SwarmJobMarket"
DOMAIN_VERSION = "2"
JOB_RESULT_FIELDS = [
    ("jobId", "uint256"), ("provider", "address"), ("pricePerUnit", "uint128"), ("resultHash", "bytes32"),
    ("units", "uint64"),
]
JOB_FAILURE_FIELDS = [
    ("jobId", "uint256"), ("provider", "address"), ("pricePerUnit", "uint128"), ("units", "uint64"),
]
DOMAIN_TYPEHASH = keccak(
    b"EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"
)
JOB_RESULT_TYPEHASH = keccak(
    b"JobResult(uint256 jobId,address provider,uint128 pricePerUnit,bytes32 resultHash,uint64 units)"
)
# A provider's word that its lease of a job failed by the job's own fault after holding `units`.
JOB_FAILURE_TYPEHASH = keccak(b"JobFailure(uint256 jobId,address provider,uint128 pricePerUnit,uint64 units)")
MAX_UINT64 = 2**64 - 1
MAX_UINT128 = 2**128 - 1


@dataclass(frozen=True)
class JobTerms:
    """The assignment a provider signs for: the job, the provider it runs on and its price per unit,
    as the chain holds them (JobMarket.getJob)."""

    job_id: int
    provider: str
    price_per_unit: int

    def message(self) -> dict[str, Any]:
        return {"jobId": self.job_id, "provider": self.provider, "pricePerUnit": self.price_per_unit}


def result_typed_data(
    chain_id: int, market: str, terms: JobTerms, result_hash: bytes, units: int
) -> dict[str, Any]:
    """The full typed-data message a provider signs (eth-account's `full_message`): the job of
    `terms`, run by its provider at its price, produced `result_hash` using `units` units, in the
    domain of the JobMarket at `market` on chain `chain_id`."""
    _check(terms, result_hash, units)
    return typed_message(
        "JobResult",
        JOB_RESULT_FIELDS,
        domain(DOMAIN_NAME, DOMAIN_VERSION, chain_id, market),
        terms.message() | {"resultHash": bytes(result_hash), "units": units},
    )


def result_digest(chain_id: int, market: str, terms: JobTerms, result_hash: bytes, units: int) -> bytes:
    """The 32-byte EIP-712 digest of that message, as JobMarket.resultDigest returns it."""
    _check(terms, result_hash, units)
    struct_hash = keccak(abi_encode(
        ["bytes32", "uint256", "address", "uint128", "bytes32", "uint64"],
        [JOB_RESULT_TYPEHASH, terms.job_id, terms.provider, terms.price_per_unit, bytes(result_hash), units],
    ))
    return keccak(b"\x19\x01" + _domain_separator(chain_id, market) + struct_hash)


def failure_typed_data(chain_id: int, market: str, terms: JobTerms, units: int) -> dict[str, Any]:
    """The typed-data message a provider signs when its lease of the job of `terms` failed by
    the job's own fault after holding `units` units."""
    _check(terms, bytes(32), units)
    return typed_message(
        "JobFailure",
        JOB_FAILURE_FIELDS,
        domain(DOMAIN_NAME, DOMAIN_VERSION, chain_id, market),
        terms.message() | {"units": units},
    )


def failure_digest(chain_id: int, market: str, terms: JobTerms, units: int) -> bytes:
    """The EIP-712 digest of `JobFailure(jobId, provider, pricePerUnit, units)`, as
    JobMarket.failureDigest returns it: what a provider signs for chargeJob to pay the units a
    failed lease held."""
    _check(terms, bytes(32), units)
    struct_hash = keccak(abi_encode(
        ["bytes32", "uint256", "address", "uint128", "uint64"],
        [JOB_FAILURE_TYPEHASH, terms.job_id, terms.provider, terms.price_per_unit, units],
    ))
    return keccak(b"\x19\x01" + _domain_separator(chain_id, market) + struct_hash)


def sign_failure(key: bytes, chain_id: int, market: str, terms: JobTerms, units: int) -> bytes:
    """The provider's 65-byte signature over its lease's failure and the units it held."""
    from eth_account import Account

    return bytes(Account.unsafe_sign_hash(failure_digest(chain_id, market, terms, units), key).signature)


def _domain_separator(chain_id: int, market: str) -> bytes:
    return keccak(abi_encode(
        ["bytes32", "bytes32", "bytes32", "uint256", "address"],
        [DOMAIN_TYPEHASH, keccak(DOMAIN_NAME.encode()), keccak(DOMAIN_VERSION.encode()), chain_id, market],
    ))


def sign_result(
    key: bytes, chain_id: int, market: str, terms: JobTerms, result_hash: bytes, units: int
) -> bytes:
    """The provider's 65-byte signature (r, s, v) over its job's result and units: the
    signature a wallet makes of `result_typed_data`, made here from the digest directly."""
    from eth_account import Account

    digest = result_digest(chain_id, market, terms, result_hash, units)
    return bytes(Account.unsafe_sign_hash(digest, key).signature)


def result_signer(
    signature: bytes, chain_id: int, market: str, terms: JobTerms, result_hash: bytes, units: int
) -> str:
    """The address whose key made `signature` over that result (checksummed), recovered
    through eth-account's own typed-data encoding of `result_typed_data`."""
    from eth_account import Account
    from eth_account.messages import encode_typed_data

    typed = result_typed_data(chain_id, market, terms, result_hash, units)
    return Account.recover_message(encode_typed_data(full_message=typed), signature=signature)


def _check(terms: JobTerms, result_hash: bytes, units: int) -> None:
    if len(result_hash) != 32:
        raise InvalidInput(
            f"result hash must be 32 bytes (a keccak256 of the outputs), got {len(result_hash)}."
        )
    if not 0 <= units <= MAX_UINT64:
        raise InvalidInput(f"units must be a whole number from 0 to {MAX_UINT64}, got {units}.")
    if not 0 <= terms.price_per_unit <= MAX_UINT128:
        raise InvalidInput(f"price per unit must be from 0 to {MAX_UINT128} wei, got {terms.price_per_unit}.")
