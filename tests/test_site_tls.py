"""A site's certificate is authenticated by the fingerprint its provider registers on chain:
a client talks to the site that holds it, and refuses any other, on a real TLS server."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

import pytest

from anvil import dev_account
from ledger import stake
from ledger.client import Swarm
from ledger.errors import InvalidInput
from ledger.specs import spec_hash
from provider.identity import make_identity
from wire.tls import WrongCertificate, connect, fingerprint, pinned_context


def _serve(identity, answer: bytes) -> tuple[int, threading.Thread]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(identity.certificate, identity.key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve_once() -> None:
        with listener:
            conn, _ = listener.accept()
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(answer)
            except (ssl.SSLError, OSError):
                pass

    thread = threading.Thread(target=serve_once, daemon=True)
    thread.start()
    return port, thread


def test_a_client_talks_to_the_site_whose_certificate_is_registered(tmp_path: Path) -> None:
    site = make_identity(tmp_path / "site", "127.0.0.1")
    assert site.fingerprint == fingerprint(site.certificate.read_bytes()) and len(site.fingerprint) == 64
    assert oct(site.key.stat().st_mode & 0o777) == "0o600"
    assert make_identity(tmp_path / "site", "127.0.0.1") == site, "made once, then reused"
    port, thread = _serve(site, b"hello from the site")
    with connect("127.0.0.1", port, site.fingerprint) as sock:
        assert sock.recv(64) == b"hello from the site"
    thread.join(5)


def test_every_call_shares_one_client_context_that_loads_no_authority_and_speaks_tls_1_2_or_later() -> None:
    """The fingerprint is the only check, so the system's authorities are not loaded: loading them
    cost every call to a site tens of milliseconds."""
    context = pinned_context()
    assert context is pinned_context()
    system_authorities = ssl.create_default_context().cert_store_stats()["x509_ca"]
    assert context.cert_store_stats()["x509_ca"] == 0 < system_authorities
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_NONE and not context.check_hostname


def test_an_impostor_with_another_certificate_is_refused(tmp_path: Path) -> None:
    site = make_identity(tmp_path / "site", "127.0.0.1")
    impostor = make_identity(tmp_path / "impostor", "127.0.0.1")  # same name, another key
    assert impostor.fingerprint != site.fingerprint
    port, thread = _serve(impostor, b"send me your job")
    with pytest.raises(WrongCertificate, match="not the one registered on chain"):
        connect("127.0.0.1", port, site.fingerprint)
    thread.join(5)


def test_the_site_url_and_fingerprint_are_part_of_the_registered_spec(swarm: Swarm, tmp_path: Path) -> None:
    site = make_identity(tmp_path / "site", "127.0.0.1")
    spec = stake.HardwareSpec(
        "cpu", 1, 1, site_url="https://127.0.0.1:8443", site_fingerprint=site.fingerprint
    )
    stored = spec.as_dict()
    assert stored["site_url"] == "https://127.0.0.1:8443" and stored["site_fingerprint"] == site.fingerprint
    provider = swarm.sender(dev_account(3).key)
    stake.register(swarm, provider, spec_hash(stored), 1)
    assert stake.provider_info(swarm, provider.address).spec_hash == spec_hash(stored)
    other = stake.HardwareSpec("cpu", 1, 1, site_url="https://127.0.0.1:8443",
                               site_fingerprint=make_identity(tmp_path / "other", "127.0.0.1").fingerprint)
    assert spec_hash(other.as_dict()) != spec_hash(stored), "another certificate is another spec"


@pytest.mark.parametrize(("url", "fp", "message"), [
    ("http://127.0.0.1:8443", "a" * 64, "must be https://"),
    ("https://127.0.0.1:8443", "A" * 64, "64 lower-case hex digits"),
    ("https://127.0.0.1:8443", None, "needs both its url and its certificate's fingerprint"),
    (None, "a" * 64, "needs both its url and its certificate's fingerprint"),
])
def test_a_malformed_site_is_refused_in_one_sentence(url, fp, message) -> None:
    with pytest.raises(InvalidInput, match=message):
        stake.HardwareSpec("cpu", 1, 1, site_url=url, site_fingerprint=fp)
