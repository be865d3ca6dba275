"""Everything that talks to a chain or the ledger: artifacts, deploy, transactions,
keys, the contracts' calls (docs/architecture.md §3)."""
