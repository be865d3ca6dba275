"""Everything that talks to a chain or the ledger: artifacts, deploy, transactions,
keys, the contracts' calls (DESIGN §3)."""
