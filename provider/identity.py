"""A site's TLS identity: its key and the self-signed certificate whose sha256 fingerprint the
provider registers on chain with its site's URL; clients pin it (`wire.tls`)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from wire.tls import fingerprint


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
