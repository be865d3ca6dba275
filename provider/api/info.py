"""`GET /v1/info`, public: whose site this is, for which deployment, and what it has."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from provider.api.deps import LeaseSite, Parts

router = APIRouter()


@router.get("/v1/info")
def info(parts: Parts, site: LeaseSite) -> dict[str, Any]:
    """The provider, the chain id, the market, and the capacity of the site's live nodes."""
    return {"provider": parts.provider, "chain_id": parts.chain_id, "market": parts.market,
            "capacity": site.capacity()}
