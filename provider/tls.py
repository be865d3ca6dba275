"""A site's TLS identity: a self-signed certificate whose sha256 fingerprint the provider
registers on chain with its site's URL, so anyone finds and authenticates the site from the
chain alone — no certificate authority, as Akash keeps provider certificates on chain.

A client pins the fingerprint: it accepts the site's certificate only if its DER encoding
hashes to the registered value, whatever names or authority the certificate claims.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from compute.errors import ComputeError


@dataclass(frozen=True)
class SiteIdentity:
    certificate: Path  # PEM
    key: Path  # PEM, readable by the site's user only
    fingerprint: str  # sha256 of the certificate's DER encoding, 64 hex digits


def make_identity(directory: Path, host: str, days: int = 825) -> SiteIdentity:
    """Creates (once) the site's key and self-signed certificate for `host` in `directory`."""
    certificate, key = directory / "site-cert.pem", directory / "site-key.pem"
    if certificate.exists() and key.exists():
        return SiteIdentity(certificate, key, fingerprint(certificate.read_bytes()))
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    private = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    try:
        alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        alt = x509.DNSName(host)
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(private.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
            .sign(private, hashes.SHA256()))
    directory.mkdir(parents=True, exist_ok=True)
    key.touch(mode=0o600)
    key.write_bytes(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    certificate.write_bytes(pem)
    return SiteIdentity(certificate, key, fingerprint(pem))


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


def check_peer(sock: ssl.SSLSocket, expected: str) -> None:
    """Refuses a TLS connection whose certificate is not the one registered on chain."""
    der = sock.getpeercert(binary_form=True)
    got = fingerprint(der) if der else ""
    if got != expected:
        raise ComputeError(f"The site presented a certificate with fingerprint {got or 'none'}, not the one "
                           f"registered on chain ({expected}); refusing to talk to it.")


def connect(host: str, port: int, expected: str, timeout: float = 10.0) -> ssl.SSLSocket:
    """A TLS connection to a site, only if its certificate is the registered one."""
    raw = socket.create_connection((host, port), timeout=timeout)
    sock = pinned_context().wrap_socket(raw, server_hostname=host)
    try:
        check_peer(sock, expected)
    except ComputeError:
        sock.close()
        raise
    return sock
