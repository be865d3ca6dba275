"""`swarm dashboard`: a live web page, a JSON API and Prometheus metrics over the ledger database.

It reads only what the indexer, the market service and the oracle wrote (plus the specs
and Ray Train checkpoints under SWARM_HOME), so it runs with the chain down.
"""

from dashboard.app import create_app

__all__ = ["create_app"]
