"""The provider's side: its on-chain operations and its site — the agent over its Ray cluster,
the site's API and who may ask it what, and its leases (docs/architecture.md §4)."""
