"""The head's mesh on the site's API (`/v1/mesh/...`, docs/architecture.md §4): the site's own
machines join it, ask for their peers, list its machines and remove one, each request carrying
the site's join secret in its body (`provider.mesh.HeadMesh`)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter

from core.errors import Refused
from provider.api.deps import Body, Mesh

router = APIRouter(prefix="/v1/mesh")


def fields(body: bytes, names: tuple[str, ...]) -> dict[str, Any]:
    """A mesh request's body: the join secret and `names`; 400 in one sentence otherwise."""
    try:
        raw = json.loads(body)
        if isinstance(raw, dict) and isinstance(raw.get("secret"), str) and set(names) <= set(raw):
            return raw
    except ValueError:
        pass
    shape = ", ".join(f'"{name}": ...' for name in ("secret", *names))
    raise Refused(400, f"A mesh request's body is {{{shape}}}.")


@router.post("/join")
def join(mesh: Mesh, body: Body) -> dict[str, Any]:
    """A machine of the site joins: its name, its public key, and where it listens (null: it
    only dials out). The answer: its address in the mesh and its peers."""
    raw = fields(body, ("name", "public_key", "endpoint"))
    endpoint = raw["endpoint"] if isinstance(raw["endpoint"], str) else None
    return mesh.join(raw["secret"], str(raw["name"]), str(raw["public_key"]), endpoint)


@router.post("/peers")
def peers(mesh: Mesh, body: Body) -> dict[str, Any]:
    raw = fields(body, ("public_key",))
    return {"peers": mesh.peers(raw["secret"], str(raw["public_key"]))}


@router.post("/machines")
def machines(mesh: Mesh, body: Body) -> dict[str, Any]:
    raw = fields(body, ())
    return {"network": mesh.coordinator.state.network, "machines": mesh.machines(raw["secret"])}


@router.post("/remove")
def remove(mesh: Mesh, body: Body) -> dict[str, Any]:
    raw = fields(body, ("name",))
    removed = mesh.remove(raw["secret"], str(raw["name"]))
    return {"removed": removed.name, "address": removed.address}
