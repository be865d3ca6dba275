"""Errors of the devnet a user can act on; each message names the problem and the fix."""


class AnvilError(Exception):
    """The local anvil could not be started, reached or stopped."""
