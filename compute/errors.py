"""Errors of the compute side a user or operator can act on, in Swarm's one family (`core.errors`)."""

from core.errors import Fault, SwarmError, UserError


class ComputeError(SwarmError):
    """A job or node request that cannot be served; the message says why and what to do."""


class InvalidJob(ComputeError, UserError):
    """A job's parameters are malformed or impossible (checked before any Ray work).

    `field` is the spec field to blame (`params.env`, `inputs.digits`), where one is."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class ProviderFault(ComputeError, Fault):
    """The job failed because of the provider's nodes (lost, dead or unreachable)."""

    def __init__(self, provider: str, message: str) -> None:
        super().__init__(message)
        self.provider = provider


class JobTimedOut(ComputeError):
    """The job ran past its timeout and was stopped."""
