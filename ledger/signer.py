"""Who signs for the Python APIs (`market.buyer.Buyer`, `ledger.operator.Provider`): one of
anvil's dev accounts on a devnet, or an encrypted keystore; never a key given as an argument."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from anvil import dev_account
from ledger.client import Swarm
from ledger.errors import SwarmError
from ledger.keys import Keystore

if TYPE_CHECKING:
    from ledger.tx import Sender


def open_signer(swarm: Swarm, home: Path, account: int | None = None, key: str | None = None,
                password: str | None = None) -> Sender | None:
    """The sender for anvil's dev account `account` (devnets only) or the keystore `key` in
    `home`/keys (its name or address, unlocked with `password` or SWARM_KEY_PASSWORD); None,
    for an API that only reads, when given neither."""
    if account is not None and key is not None:
        raise SwarmError("Give either an account or a key, not both.")
    if account is not None:
        if not swarm.chain.is_devnet:
            raise SwarmError(
                f"Dev account {account} is refused on chain {swarm.chain.chain_id}, which is not a "
                "devnet; sign with a keystore instead."
            )
        return swarm.sender(dev_account(account).key)
    if key is None:
        return None
    store = Keystore(home / "keys")
    info = store.find(key)
    password = password if password is not None else os.environ.get("SWARM_KEY_PASSWORD")
    if password is None:
        raise SwarmError(
            f"The keystore {info.address} needs its password; pass it or set SWARM_KEY_PASSWORD."
        )
    return swarm.sender(store.unlock(info, password))
