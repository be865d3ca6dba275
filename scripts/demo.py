"""`swarm demo`: the whole flow on the embedded defaults — anvil, deploy, three staked
providers, one buyer's job — ending in a table of addresses and balances."""

from __future__ import annotations

import click

from anvil import dev_account
from ledger import jobs, stake
from ledger.stake import HardwareSpec
from ledger.chain import connect
from ledger.client import Swarm
from ledger.deploy import deploy, error_decoder
from ledger.specs import store_spec
from ledger.tx import Sender
from ledger.units import ONE, format_amount
from scripts.common import console, emit, json_option, local_node, settings, table

PROVIDERS = (  # dev account, declared hardware
    (1, HardwareSpec("H100", 8, 80, "eu-west")),
    (2, HardwareSpec("A100", 4, 40, "us-east")),
    (3, HardwareSpec("RTX4090", 2, 24, "ap-south")),
)
BUYER = 4
JOB_SPEC = {"kind": "train", "model": "mlp-small", "dataset": "synthetic-classification", "workers": 2}
STAKE_HEADROOM = 3  # providers stake 1.5× their minimum: minimum × 3 / 2


@click.command()
@json_option
def demo(as_json: bool) -> None:
    """Run the demo on a local anvil (started if needed) and print who holds what."""
    s = settings()
    with console.status("Starting anvil…"):
        node_status = local_node().start()
        chain = connect(node_status.url)
    with console.status("Deploying the contracts…"):
        result = deploy(chain, Sender(chain, dev_account(0).key, error_decoder()), s.home)
    swarm = Swarm(chain, result.deployment)

    with console.status("Registering and staking three providers…"):
        for index, hardware in PROVIDERS:
            _stake_provider(swarm, index, hardware)
    with console.status("Posting a job…"):
        buyer = swarm.sender(dev_account(BUYER).key)
        deadline = chain.timestamp() + 86_400
        job_id, _ = jobs.post_job(swarm, buyer, store_spec(s.home, JOB_SPEC), 2 * ONE, 500, deadline)

    summary = _summary(swarm, job_id)
    emit(as_json, summary, lambda: _print(summary, node_status.url))


def _stake_provider(swarm: Swarm, index: int, hardware: HardwareSpec) -> None:
    sender = swarm.sender(dev_account(index).key)
    info = stake.provider_info(swarm, sender.address)
    if not info.registered:
        stake.register(swarm, sender, store_spec(settings().home, hardware.as_dict()), hardware.gpus)
        info = stake.provider_info(swarm, sender.address)
    target = info.min_stake * STAKE_HEADROOM // 2
    if info.stake < target:
        stake.stake(swarm, sender, target - info.stake)


def _summary(swarm: Swarm, job_id: int) -> dict:
    accounts = []
    for index, hardware in PROVIDERS:
        address = dev_account(index).address
        info = stake.provider_info(swarm, address)
        accounts.append({
            "role": f"provider ({hardware.gpus}× {hardware.gpu_model})",
            "account": index,
            "address": address,
            "balance_wei": swarm.balance_of(address),
            "stake_wei": info.stake,
            "min_stake_wei": info.min_stake,
        })
    buyer = dev_account(BUYER).address
    accounts.append({"role": "buyer", "account": BUYER, "address": buyer,
                     "balance_wei": swarm.balance_of(buyer), "stake_wei": 0, "min_stake_wei": 0})
    contracts = [{"contract": name, "address": address, "balance_wei": swarm.balance_of(address)}
                 for name, address in swarm.deployment.addresses.items()]
    job = jobs.job_info(swarm, job_id)
    return {
        "chain_id": swarm.chain.chain_id,
        "accounts": accounts,
        "contracts": contracts,
        "job": {"id": job_id, "status": job.status.name.lower(), "escrow_wei": job.escrow, "buyer": job.buyer},
    }


def _print(summary: dict, url: str) -> None:
    console.print(table(
        "Accounts", ["role", "account", "address", "balance", "stake", "minimum stake"],
        [(a["role"], a["account"], a["address"], format_amount(a["balance_wei"]),
          format_amount(a["stake_wei"]), format_amount(a["min_stake_wei"])) for a in summary["accounts"]],
    ))
    console.print(table(
        "Contracts", ["contract", "address", "token balance"],
        [(c["contract"], c["address"], format_amount(c["balance_wei"])) for c in summary["contracts"]],
    ))
    job = summary["job"]
    console.print(f"Job {job['id']} is {job['status']}, {format_amount(job['escrow_wei'])} in escrow.")
    console.print(f"anvil keeps running at {url}; `swarm chain status` shows it, `swarm chain down` stops it.")
