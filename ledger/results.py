"""A provider's word on a job's result: the EIP-712 JobResult(jobId, resultHash, units) that
the provider's site signs and JobMarket.completeJob checks."""

from __future__ import annotations

DOMAIN_NAME = "SwarmJobMarket"
DOMAIN_VERSION = "1"


def result_typed_data(chain_id: int, market: str, job_id: int, result_hash: bytes, units: int) -> dict:
    return {
        "types": {
            "EIP712Domain": [{"name": "name", "type": "string"}, {"name": "version", "type": "string"},
                             {"name": "chainId", "type": "uint256"}, {"name": "verifyingContract", "type": "address"}],
            "JobResult": [{"name": "jobId", "type": "uint256"}, {"name": "resultHash", "type": "bytes32"},
                          {"name": "units", "type": "uint64"}],
        },
        "primaryType": "JobResult",
        "domain": {"name": DOMAIN_NAME, "version": DOMAIN_VERSION, "chainId": chain_id, "verifyingContract": market},
        "message": {"jobId": job_id, "resultHash": result_hash, "units": units},
    }


def sign_result(key: bytes, chain_id: int, market: str, job_id: int, result_hash: bytes, units: int) -> bytes:
    from eth_account import Account

    message = result_typed_data(chain_id, market, job_id, result_hash, units)
    return bytes(Account.from_key(key).sign_typed_data(full_message=message).signature)


def result_signer(signature: bytes, chain_id: int, market: str, job_id: int, result_hash: bytes, units: int) -> str:
    from eth_account import Account
    from eth_account.messages import encode_typed_data

    message = encode_typed_data(full_message=result_typed_data(chain_id, market, job_id, result_hash, units))
    return Account.recover_message(message, signature=signature)
