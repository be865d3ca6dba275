"""Gas of the calls users pay for, measured from real transaction receipts on anvil.

Run: make bench-gas   (or .venv/bin/python bench/gas.py)

Receipts include the 21,000 intrinsic gas and calldata; forge's figures
(contracts/snapshots/swarm.json) are the execution gas of the call alone. Gas is
deterministic for a given state, so one run is the figure.
"""

from __future__ import annotations

import json
import secrets
import sys
import tempfile
from pathlib import Path

from eth_utils import to_checksum_address

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from anvil import AnvilConfig, AnvilNode, dev_account
from anvil.node import free_port
from ledger import jobs, rewards, stake
from ledger.chain import connect
from ledger.client import Swarm
from ledger.deploy import deploy, devnet_committee_keys, error_decoder
from ledger.merkle import RewardTree
from ledger.permit import Allowance
from ledger.tx import Sender
from ledger.units import ONE

RESULTS = Path(__file__).resolve().parent / "results" / "gas.json"
TREE_SIZE = 100_000
TARGETS = {
    "stake (first)": 70_000,
    "stake (top-up)": 70_000,
    "requestUnstake": 60_000,
    "claim, 100,000-leaf tree (holder)": 85_000,
    "claim, 100,000-leaf tree (new holder)": 90_000,  # on receipts: what the provider pays
    "submitEpoch, 3 signatures, 10 providers": 200_000,
    "submitEpoch, 3 signatures, 100,000 providers": 200_000,
    "postJob": 130_000,
}


def random_address() -> str:
    return to_checksum_address(secrets.token_bytes(20))


def main() -> None:
    home = Path(tempfile.mkdtemp(prefix="swarm-gas-"))
    node = AnvilNode(AnvilConfig(home=home, port=free_port()))
    node.start()
    try:
        figures = measure(node, home)
    finally:
        node.stop()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    print("| call | target | receipt gas |")
    print("|---|---:|---:|")
    for name, gas in figures.items():
        target = TARGETS.get(name)
        print(f"| {name} | {'≤ ' + format(target, ',') if target else '—'} | {gas:,} |")


def measure(node: AnvilNode, home: Path) -> dict[str, int]:
    chain = connect(node.config.url)
    swarm = Swarm(chain, deploy(chain, Sender(chain, dev_account(0).key, error_decoder()), home).deployment)
    figures: dict[str, int] = {}

    # Providers approve once, then stake: the stake transaction alone is measured.
    providers = [swarm.sender(dev_account(i).key) for i in (1, 2)]
    for p in providers:
        stake.register(swarm, p, secrets.token_bytes(32), 2)
        p.send(swarm.token.functions.approve(swarm.vault.address, 2**256 - 1))
    stake.stake(swarm, providers[0], 5_000 * ONE, Allowance.APPROVED)  # the vault is not empty
    figures["stake (first)"] = stake.stake(swarm, providers[1], 5_000 * ONE, Allowance.APPROVED).gas_used
    figures["stake (top-up)"] = stake.stake(swarm, providers[1], 1_000 * ONE, Allowance.APPROVED).gas_used
    figures["requestUnstake"] = stake.request_unstake(swarm, providers[1], 500 * ONE).gas_used

    keeper = swarm.sender(dev_account(9).key)
    keys = devnet_committee_keys()[:3]
    guardian = swarm.sender(dev_account(0).key)

    def submit(epoch: int, tree: RewardTree, total: int) -> int:
        report = rewards.build_report(swarm, epoch, tree, total, [])
        return rewards.submit_epoch(swarm, keeper, report, [], rewards.sign(swarm, report, keys)).gas_used

    # The distributor's first report ever creates its storage; measure the steady state after it.
    figures["submitEpoch, 3 signatures, first report ever"] = submit(
        1, RewardTree.build({random_address(): ONE}), ONE
    )
    rewards.veto_epoch(swarm, guardian, 1)
    small = RewardTree.build({random_address(): ONE for _ in range(10)})
    figures["submitEpoch, 3 signatures, 10 providers"] = submit(1, small, 10 * ONE)
    rewards.veto_epoch(swarm, guardian, 1)

    # A provider that staked every token it had: its claim creates its token balance.
    newcomer_sender = swarm.sender(dev_account(7).key)
    stake.register(swarm, newcomer_sender, secrets.token_bytes(32), 1)
    newcomer_sender.send(swarm.token.functions.approve(swarm.vault.address, 2**256 - 1))
    stake.stake(swarm, newcomer_sender, swarm.balance_of(newcomer_sender.address), Allowance.APPROVED)
    newcomer = newcomer_sender.address
    assert swarm.balance_of(newcomer) == 0
    holder = dev_account(1).address
    cumulative = {random_address(): ONE for _ in range(TREE_SIZE - 2)} | {newcomer: ONE, holder: ONE}
    big = RewardTree.build(cumulative)
    figures["submitEpoch, 3 signatures, 100,000 providers"] = submit(1, big, TREE_SIZE * ONE)
    node.rpc.increase_time(swarm.distributor.functions.challengeWindow().call())
    figures["finalizeEpoch"] = rewards.finalize_epoch(swarm, keeper, []).gas_used
    figures["claim, 100,000-leaf tree (new holder)"] = rewards.claim(
        swarm, keeper, newcomer, ONE, big.proof(newcomer)
    ).gas_used
    figures["claim, 100,000-leaf tree (holder)"] = rewards.claim(
        swarm, keeper, holder, ONE, big.proof(holder)
    ).gas_used
    figures["proof length, 100,000-leaf tree"] = len(big.proof(holder))

    buyer = swarm.sender(dev_account(4).key)
    buyer.send(swarm.token.functions.approve(swarm.market.address, 2**256 - 1))
    deadline = chain.timestamp() + 86_400
    jobs.post_job(swarm, swarm.sender(dev_account(5).key), secrets.token_bytes(32), ONE, 100, deadline)
    _, receipt = jobs.post_job(
        swarm, buyer, secrets.token_bytes(32), ONE, 100, deadline, Allowance.APPROVED
    )
    figures["postJob"] = receipt.gas_used
    return figures


if __name__ == "__main__":
    main()
