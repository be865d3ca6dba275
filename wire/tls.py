"""Pinning a site's certificate: a site presents a self-signed certificate whose sha256
fingerprint the provider registers on chain with its site's URL (`provider.identity` makes it),
so anyone finds and authenticates the site from the chain alone — no certificate authority, as
Akash keeps provider certificates on chain.

A client pins the fingerprint: it accepts the site's certificate only if its DER encoding
hashes to the registered value, whatever names or authority the certificate claims.
"""

from __future__ import annotations

import functools
import hashlib
import socket
import ssl

from core.errors import Fault


def fingerprint(pem_or_der: bytes) -> str:
    """The sha256 of a certificate's DER encoding, as 64 lower-case hex digits."""
    der = (
        ssl.PEM_cert_to_DER_cert(pem_or_der.decode())
        if pem_or_der.lstrip().startswith(b"-----")
        else pem_or_der
    )
    return hashlib.sha256(der).hexdigest()


@functools.cache
def pinned_context() -> ssl.SSLContext:
    """The client context that skips authority checks: the caller pins the fingerprint instead.

    One for the process (a context is safe to share between threads), and without the system's
    certificate authorities, which it would never consult: loading them took tens of
    milliseconds on every call to a site, a third of the market's and the oracle's CPU."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # TLS 1.2 at least, the secure defaults
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class WrongCertificate(Fault):
    """The site presented a certificate other than the one its provider registered on chain."""


def check_peer(sock: ssl.SSLSocket, expected: str) -> None:
    """Refuses a TLS connection whose certificate is not the one registered on chain."""
    der = sock.getpeercert(binary_form=True)
    got = fingerprint(der) if der else ""
    if got != expected:
        raise WrongCertificate(f"The site presented a certificate with fingerprint {got or 'none'}, not the "
                               f"one registered on chain ({expected}); refusing to talk to it.")


def connect(host: str, port: int, expected: str, timeout: float = 10.0) -> ssl.SSLSocket:
    """A TLS connection to a site, only if its certificate is the registered one."""
    raw = socket.create_connection((host, port), timeout=timeout)
    sock = pinned_context().wrap_socket(raw, server_hostname=host)
    try:
        check_peer(sock, expected)
    except WrongCertificate:
        sock.close()
        raise
    return sock
