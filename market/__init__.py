"""Job specs, matching, job lifecycle, settlement and the market service (docs/architecture.md §5)."""
