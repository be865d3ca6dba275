"""Everything that talks to a chain or the ledger: artifacts, deploy, transactions,
keys, the contracts' calls (docs/architecture.md §3)."""

import anvil  # noqa: F401 -- first: it has eth_account load without BLS12-381 (anvil.keyfile)
