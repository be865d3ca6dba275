"""Reading a job's `params` into a runner's typed settings, with errors that name the key."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from compute.errors import InvalidJob
from compute.jobs import ComputeJob

P = TypeVar("P")
KIND_OF = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def parse_params(cls: type[P], job: ComputeJob) -> P:
    """`cls(**job.params)` after checking every key is known and every value has the
    type of its default (an int is accepted where a float is expected)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(job.params) - set(fields))
    if unknown:
        raise InvalidJob(
            f"job {job.job_id}: unknown {job.kind} parameter(s) {', '.join(unknown)}; "
            f"known ones are {', '.join(fields)}."
        )
    for key, value in job.params.items():
        _check_type(job, key, value, fields[key].default)
    return cls(**job.params)


def _check_type(job: ComputeJob, key: str, value: Any, default: Any) -> None:
    if default is None:  # an optional setting: the runner checks its values
        return
    expected: tuple[type, ...] = (int, float) if isinstance(default, float) else (type(default),)
    if isinstance(value, bool) and bool not in expected or not isinstance(value, expected):
        raise InvalidJob(
            f"job {job.job_id}: {job.kind} parameter {key} must be {KIND_OF[expected[-1]]}, got {value!r}."
        )


def require(condition: bool, job: ComputeJob, message: str) -> None:
    """Raises InvalidJob(`job <id>: <message>`) unless `condition` holds."""
    if not condition:
        raise InvalidJob(f"job {job.job_id}: {message}")
