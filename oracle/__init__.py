"""Telemetry aggregation, scoring, slashing, epoch reports and the signer quorum (DESIGN §6)."""
