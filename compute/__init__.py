"""The Ray side: provider nodes, job runners, telemetry probes, benchmark challenge (DESIGN §4)."""
