"""Telemetry aggregation, scoring, slashing, epoch reports and the signer quorum (docs/architecture.md §6)."""
