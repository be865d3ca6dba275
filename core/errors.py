"""The one family of errors Swarm raises for what is not a bug (docs/architecture.md §1).

Each message is one sentence that names the input and the fix. The class says whose problem it
is, and so how a boundary answers it: a site's API answers with the class's HTTP `status`, the
command line prints the sentence and exits 1. A bug (a `KeyError`, an `AttributeError`) belongs
to none of them, so no boundary mistakes it for a refusal or an unreachable party: it keeps its
traceback.

    SwarmError                 the root
    ├── UserError      400     the caller's input or environment is wrong; the fix is theirs
    ├── Refused        status  a party will not serve a request: a site, a receipt book, a mesh
    ├── Unavailable    503     a party did not answer, or not yet: a chain, a site; try again
    └── Fault          500     a party broke what it promised: a provider's nodes, a malformed answer
"""

from __future__ import annotations


class SwarmError(Exception):
    """A problem that is not a bug; the message says what to do about it."""

    status: int = 500  # what a site's API answers with


class UserError(SwarmError):
    """The caller's input or environment is wrong: a spec, an argument, a file, a permission."""

    status = 400


class Refused(SwarmError):
    """A request a party will not serve: `status` is the HTTP status it answers with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Unavailable(SwarmError):
    """A party did not answer, or is not ready yet: asking again later may succeed."""

    status = 503


class Fault(SwarmError):
    """A party broke what it promised: a provider's nodes lost, an answer its API never sends."""

    status = 500
