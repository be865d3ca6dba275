"""Pinning work to one provider's nodes: the `provider=<address>` label and the
`provider:<address>` custom resource every provider node carries (docs/architecture.md §4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LABEL = "provider"
# A sliver of the per-node custom resource: enough to pin, never enough to limit.
PIN = 0.001


def provider_resource(provider: str) -> str:
    return f"provider:{provider}"


def node_labels(provider: str) -> dict[str, str]:
    return {LABEL: provider}


def node_resources(provider: str) -> dict[str, float]:
    return {provider_resource(provider): 1.0}


def label_selector(provider: str) -> dict[str, str]:
    return {LABEL: provider}


def task_options(provider: str, num_cpus: float = 1, num_gpus: float = 0) -> dict[str, Any]:
    """`.options(...)` for a task or actor that must run on `provider`'s nodes."""
    return {
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "label_selector": label_selector(provider),
        "resources": {provider_resource(provider): PIN},
    }


@dataclass(frozen=True)
class ProviderCapacity:
    provider: str
    nodes: int  # alive nodes labelled for the provider
    cpus: float
    gpus: float

    @property
    def max_workers(self) -> int:
        """Workers of one CPU (or one GPU, where it has GPUs) the provider can run at once."""
        return int(self.gpus) if self.gpus >= 1 else int(self.cpus)


def provider_nodes(provider: str) -> list[dict]:
    """The alive Ray nodes labelled for `provider` (needs ray.init)."""
    import ray

    return [
        n for n in ray.nodes()
        if n.get("Alive") and (n.get("Labels") or {}).get(LABEL) == provider
    ]


def provider_capacity(provider: str) -> ProviderCapacity:
    nodes = provider_nodes(provider)
    return ProviderCapacity(
        provider=provider,
        nodes=len(nodes),
        cpus=sum(n["Resources"].get("CPU", 0.0) for n in nodes),
        gpus=sum(n["Resources"].get("GPU", 0.0) for n in nodes),
    )


def providers_in_cluster() -> list[str]:
    """Every provider address with at least one alive node."""
    import ray

    return sorted(
        {label for n in ray.nodes() if n.get("Alive") and (label := (n.get("Labels") or {}).get(LABEL))}
    )
