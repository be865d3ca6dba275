"""What a buyer does before a job is posted: its code and inputs put in the buyer's own storage
and pinned by their sha256 (docs/market.md, "Your own program").

`pin(spec, base, upload_to)` turns a spec that names code or inputs by a local path or an
unpinned URI into one that names each by `{uri, sha256}`:

- a local code directory is packed (`compute.dataplane.pack`) and uploaded as
  `<upload_to>/code/<sha256>.tar`; a local file or directory input goes to
  `<upload_to>/inputs/<sha256>/<its name>`. Content-addressed, so posting the same code
  again uploads nothing new.
- a URI is read once to compute its digest, and stays where it is.

Relative paths are the spec file's (`base`); `upload_to` defaults to the spec's output
(`<output>/uploads`). Nothing passes through the market: the buyer's machine writes to the
buyer's storage, and the site reads from it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from compute import dataplane
from market.spec import JobSpec, SpecError, validate_spec

UPLOADS = "uploads"


def pin(spec: JobSpec, base: Path, upload_to: str | None = None) -> JobSpec:
    """The spec with its code and inputs uploaded (if local) and pinned; its output made absolute
    if it is a local path. Raises SpecError naming the field that cannot be pinned."""
    if not spec.unpinned() and (spec.output is None or dataplane.is_uri(spec.output)):
        return spec
    output = _located(spec.output, base) if spec.output else None
    upload_to = upload_to or (dataplane.join(output, UPLOADS) if output else None)
    data: dict[str, Any] = spec.canonical() | {"output": output}
    if isinstance(spec.code, str):
        data["code"] = _pin_code(_located(spec.code, base), upload_to)
    for name, value in spec.inputs.items():
        if isinstance(value, str):
            data["inputs"][name] = _pin_input(name, _located(value, base), upload_to)
    return validate_spec(data, now=spec.deadline - 1)


def _located(value: str, base: Path) -> str:
    if dataplane.is_uri(value):
        return value
    return str((base / Path(value).expanduser()).resolve())


def _pin_code(location: str, upload_to: str | None) -> dict[str, str]:
    try:
        if dataplane.is_uri(location):  # an archive the buyer packed and stored already
            return {"uri": location, "sha256": dataplane.digest(location, "code")}
        archive = dataplane.pack(Path(location))
        import hashlib

        sha = hashlib.sha256(archive).hexdigest()
        target = dataplane.join(_upload_place(upload_to, "code"), f"code/{sha}.tar")
        if not dataplane.exists(target):
            with tempfile.TemporaryDirectory() as scratch:
                packed = Path(scratch) / "code.tar"
                packed.write_bytes(archive)
                dataplane.upload(packed, target, what="packed code")
        return {"uri": target, "sha256": sha}
    except dataplane.DataPlaneError as exc:
        raise SpecError(f"spec field code cannot be pinned: {exc}.", "code") from None


def _pin_input(name: str, location: str, upload_to: str | None) -> dict[str, str]:
    field = f"inputs.{name}"
    try:
        sha = dataplane.digest(location, f"input {name}")
        if dataplane.is_uri(location):
            return {"uri": location, "sha256": sha}
        target = dataplane.join(_upload_place(upload_to, field), f"inputs/{sha}/{Path(location).name}")
        if not dataplane.exists(target):
            dataplane.upload(Path(location), target, what=f"input {name}")
        return {"uri": target, "sha256": sha}
    except dataplane.DataPlaneError as exc:
        raise SpecError(f"spec field {field} cannot be pinned: {exc}.", field) from None


def _upload_place(upload_to: str | None, field: str) -> str:
    if not upload_to:
        raise SpecError(f"spec field {field} names a local path, which a site cannot read; give an output "
                        "(the uploads go next to it) or a URI of the buyer's storage.", field)
    return upload_to
