"""What every Swarm package shares, below all of them: the family of errors (`core.errors`), the
vocabulary of hardware a provider declares (`core.hardware`), and the versioned local SQLite store
(`core.local_store`). It imports nothing of Swarm, and nothing beyond the standard library."""
