"""A provider's site put together: its Ray cluster, its agent, the chain's authorization (docs/architecture.md §4)."""
