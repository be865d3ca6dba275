"""What every Swarm package shares, below all of them: the family of errors (`core.errors`) and
the vocabulary of hardware a provider declares (`core.hardware`). It imports nothing of Swarm."""
