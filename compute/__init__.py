"""The Ray side: provider nodes, job runners, telemetry probes, benchmark challenge
(docs/architecture.md §4)."""
