"""The one JSON-RPC client: requests to an EVM node over HTTP, one at a time or in batches, on a
connection each thread keeps alive; and anvil's own methods built over it (snapshots, time, mining).

It lives in the lowest package because anvil needs it first (starting a devnet means asking it
whether it answers, and the devnet's helpers are JSON-RPC methods), and anvil must not import the
ledger. Everything above uses it: the ledger's reads (`ledger.chain.Chain.rpc`) and its indexer,
which batches block headers and, with `attempts`, rides out a node's brief absence. Its errors
(anvil/errors.py) belong to the one `SwarmError` family, each a sentence that names the node and
the fix: `ChainUnavailable` when nothing answers, the node fails (HTTP 5xx) or what answers is not
JSON-RPC; `RpcError` when the node refuses a request (a JSON-RPC error, or an HTTP 4xx).

Only the standard library: commands that read the chain start without web3 or requests
(tests/test_startup.py)."""

from __future__ import annotations

import http.client
import itertools
import json
import os
import threading
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

from anvil.errors import AnvilError, ChainUnavailable, RpcError

# Chain ids on which Swarm treats the chain as a disposable devnet.
DEVNET_CHAIN_IDS = frozenset({31337})
RPC_TIMEOUT = 30.0  # seconds for one request; the indexer's wide eth_getLogs ranges get more
BACKOFF_S = 0.2  # before the second attempt; doubled before each one after
HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
# How a kept-alive connection that the node closed meanwhile (or a node restarted) fails on
# reuse: the request is sent once more on a fresh connection.
STALE = (http.client.RemoteDisconnected, ConnectionResetError, ConnectionAbortedError, BrokenPipeError)
NO_REPLY = {"error": {"message": "the node sent no reply to it"}}

Call = tuple[str, Sequence[Any]]  # a method and its parameters


class JsonRpc:
    """Requests to one node: `rpc(method, *params)` (or `rpc.call`), or several in one `batch`.

    `attempts` > 1 tries a request again, with backoff, when no node answers, it times out or the
    node fails with an HTTP 5xx; a refusal is never tried again."""

    def __init__(self, url: str, timeout: float = RPC_TIMEOUT, attempts: int = 1) -> None:
        parts = _node_address(url)
        if parts is None:
            raise ChainUnavailable(
                f"{url!r} is not the http(s) URL of a JSON-RPC node; set SWARM_RPC_URL to one, "
                "like http://127.0.0.1:8545."
            )
        self.url = url
        self.timeout = timeout
        self.attempts = max(1, attempts)
        secure = parts.scheme == "https"
        self._connection_class = http.client.HTTPSConnection if secure else http.client.HTTPConnection
        self._host = parts.netloc.rpartition("@")[2]
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._ids = itertools.count(1)
        self._local = threading.local()  # each thread's kept-alive connection, with the pid that opened it

    def call(self, method: str, *params: Any) -> Any:
        """One request: its result. The node's JSON-RPC error raises RpcError."""
        return self._result(method, self._send(self._request(method, params), method))

    __call__ = call

    def batch(self, calls: Sequence[Call]) -> list[Any]:
        """Several requests in one round trip, their results in order; a node that takes no batches
        is asked one request at a time."""
        if len(calls) <= 1:
            return [self.call(method, *params) for method, params in calls]
        requests = [self._request(method, params) for method, params in calls]
        replies = self._send(requests, calls[0][0])
        if isinstance(replies, dict):  # a node that takes no batches answers a batch with one error
            return [self.call(method, *params) for method, params in calls]
        if not all(isinstance(reply, dict) for reply in replies):
            raise self._not_json_rpc(calls[0][0])
        by_id = {reply.get("id"): reply for reply in replies}
        return [
            self._result(method, by_id.get(request["id"], NO_REPLY))
            for request, (method, _) in zip(requests, calls, strict=True)
        ]

    def close(self) -> None:
        """Closes this thread's kept-alive connection (the next request opens another)."""
        opened = getattr(self._local, "opened", None)
        self._local.opened = None
        if opened is not None:
            opened[1].close()

    # ── one exchange ─────────────────────────────────────────────────────────
    def _request(self, method: str, params: Sequence[Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": list(params)}

    def _send(self, body: dict[str, Any] | list[dict[str, Any]], method: str) -> Any:
        """Posts `body`: the decoded reply, a JSON-RPC object or a list of them."""
        data = json.dumps(body).encode()
        failure: ChainUnavailable | None = None
        cause: BaseException | None = None
        for attempt in range(self.attempts):
            if attempt:
                time.sleep(BACKOFF_S * 2 ** (attempt - 1))
            try:
                status, raw = self._post(data)
            except TimeoutError as exc:
                failure, cause = self._timed_out(method), exc
                continue
            except (OSError, http.client.HTTPException) as exc:
                failure, cause = self._no_answer(exc), exc
                continue
            reply = _json(raw)
            if isinstance(reply, (dict, list)):  # a JSON-RPC reply, whatever the HTTP status
                return reply
            if status >= 500:  # the node (or a gateway before it) failed: maybe for a moment
                failure, cause = self._failed(method, status), None
                continue
            if status >= 400:  # refused before JSON-RPC: a wrong path, a missing key, a body too large
                text = raw[:200].decode(errors="replace").strip()
                raise RpcError(self.url, method, {"code": status, "message": f"HTTP {status} {text}".strip()})
            raise self._not_json_rpc(method)
        if failure is None:  # unreachable: attempts is at least 1, and each failed attempt sets it
            failure = self._no_answer(ConnectionError("no attempt was made"))
        raise failure from cause

    def _post(self, data: bytes) -> tuple[int, bytes]:
        """`data` on this thread's connection, or on a fresh one: the reply's status and body."""
        opened = getattr(self._local, "opened", None)
        if opened is not None and opened[0] == os.getpid():  # never a connection a parent process opened
            try:
                return self._exchange(opened[1], data)
            except STALE:
                pass
        connection = self._connection_class(self._host, timeout=self.timeout)
        self._local.opened = (os.getpid(), connection)
        return self._exchange(connection, data)

    def _exchange(self, connection: http.client.HTTPConnection, data: bytes) -> tuple[int, bytes]:
        try:
            connection.request("POST", self._target, data, HEADERS)
            response = connection.getresponse()
            raw = response.read()
        except BaseException:
            self.close()
            raise
        if response.will_close:
            self.close()
        return response.status, raw

    def _result(self, method: str, reply: Any) -> Any:
        if not isinstance(reply, dict):
            raise self._not_json_rpc(method)
        error = reply.get("error")
        if error is not None:
            raise RpcError(self.url, method, error if isinstance(error, dict) else {"message": error})
        return reply.get("result")

    # ── the sentences ────────────────────────────────────────────────────────
    def _no_answer(self, exc: BaseException) -> ChainUnavailable:
        reason = (exc.strerror if isinstance(exc, OSError) else None) or str(exc) or type(exc).__name__
        return ChainUnavailable(
            f"No chain answers at {self.url} ({reason}); start the local one with `swarm chain up`, "
            "or point SWARM_RPC_URL at a running node."
        )

    def _timed_out(self, method: str) -> ChainUnavailable:
        return ChainUnavailable(
            f"The node at {self.url} did not answer {method} within {self.timeout:g} s; "
            "check that it is running (`swarm chain status`), or point SWARM_RPC_URL at another."
        )

    def _failed(self, method: str, status: int) -> ChainUnavailable:
        return ChainUnavailable(
            f"The node at {self.url} failed {method} with HTTP {status}; "
            "check that it is running (`swarm chain status`), or point SWARM_RPC_URL at another."
        )

    def _not_json_rpc(self, method: str) -> ChainUnavailable:
        return ChainUnavailable(
            f"The node at {self.url} answered {method} with something that is not JSON-RPC; "
            "check that SWARM_RPC_URL names an EVM node."
        )


def _node_address(url: str) -> urllib.parse.SplitResult | None:
    """`url` split, if it is an http(s) URL with a host and a numeric port (or none)."""
    parts = urllib.parse.urlsplit(url)
    try:
        parts.port  # noqa: B018 - parsed on access: a port that is not a number raises ValueError
    except ValueError:
        return None
    return parts if parts.scheme in ("http", "https") and parts.hostname else None


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


class RpcClient(JsonRpc):
    """The client with anvil's own methods: for devnets and their tests, never for transactions."""

    def is_up(self) -> bool:
        try:
            self.call("eth_chainId")
        except (ChainUnavailable, RpcError):
            return False
        return True

    def chain_id(self) -> int:
        return int(self.call("eth_chainId"), 16)

    def block_number(self) -> int:
        return int(self.call("eth_blockNumber"), 16)

    def snapshot(self) -> str:
        """Takes an EVM snapshot; `revert(id)` restores it (and consumes it)."""
        return self.call("evm_snapshot")

    def revert(self, snapshot_id: str) -> None:
        if not self.call("evm_revert", snapshot_id):
            raise AnvilError(
                f"Snapshot {snapshot_id} of {self.url} could not be restored (each restores once); "
                "take another."
            )

    def increase_time(self, seconds: int) -> None:
        """Moves the chain clock forward and mines a block at the new time."""
        self.call("evm_increaseTime", int(seconds))
        self.call("evm_mine")

    def mine(self, blocks: int = 1) -> None:
        self.call("anvil_mine", hex(blocks))

    def latest_timestamp(self) -> int:
        return int(self.call("eth_getBlockByNumber", "latest", False)["timestamp"], 16)
