"""The transport of calls to operator-configured URLs (core/egress.py): a name is looked up
once per connection, every address it answers is checked, and the connection goes to a
checked address, with the URL's name kept for the Host header, TLS's SNI and the
certificate's check. Real listeners on loopback; the lookups answer as the test says."""

from __future__ import annotations

import datetime
import socket
import ssl
import time

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.test import override_settings

from core import egress
from core.egress import DeniedDestination, PinnedTransport
from tests.deployments.trickler import LATE_SECONDS, Trickler
from tests.http_double import HttpDouble, Reply


class Listener:
    """A real HTTP server that answers 200 to any request and records each request's Host
    header and the TLS server name its caller asked for (with ``tls``)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, tls=None) -> None:
        self.server_names: list[str | None] = []
        if tls is not None:
            tls.sni_callback = lambda sock, name, ctx: self.server_names.append(name)
        self.http = HttpDouble(
            lambda request: Reply(200, b"ok", content_type="text/plain"),
            host=host,
            port=port,
            tls=tls,
        )
        self.port = self.http.port

    @property
    def hosts(self) -> list[str]:
        with self.http.lock:
            return [r.headers["host"] for r in self.http.requests]

    def __enter__(self) -> Listener:
        self.http.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.http.__exit__(*exc)


class Script:
    """A lookup that answers as the test says: one answer per call, the last repeated."""

    def __init__(self, *answers: list[str] | Exception) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append((host, port))
        answer = self.answers[min(len(self.calls), len(self.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer


def client(resolve, **kwargs) -> httpx.Client:
    return httpx.Client(
        transport=PinnedTransport(resolve=resolve, **kwargs), timeout=5, trust_env=False
    )


@override_settings(DEPLOY_TRIGGER_DENY_NETWORKS=["127.0.0.2/32"])
def test_a_name_is_looked_up_once_and_connected_to_as_it_was_checked():
    script = Script(["127.0.0.1"], ["127.0.0.2"])
    with Listener("127.0.0.1") as allowed, Listener("127.0.0.2", allowed.port) as trap:
        url = f"http://ci.rebind.test:{allowed.port}/hook"
        with client(script) as http:
            assert http.get(url).status_code == 200
            # The next connection looks the name up again: now it answers a denied
            # address, which is refused, not connected to.
            with pytest.raises(DeniedDestination, match=r"127\.0\.0\.2"):
                http.get(url)
    assert script.calls == [("ci.rebind.test", allowed.port)] * 2
    assert allowed.hosts == [f"ci.rebind.test:{allowed.port}"]
    assert trap.hosts == []


@override_settings(DEPLOY_TRIGGER_DENY_NETWORKS=["127.0.0.2/32"])
def test_every_address_a_name_answers_is_checked():
    with Listener("127.0.0.1") as allowed, Listener("127.0.0.2", allowed.port) as trap:
        script = Script(["127.0.0.1", "127.0.0.2"])
        with client(script) as http, pytest.raises(DeniedDestination):
            http.get(f"http://ci.mixed.test:{allowed.port}/hook")
    assert allowed.hosts == [] and trap.hosts == []


@override_settings(DEPLOY_TRIGGER_DENY_NETWORKS=["127.0.0.0/8"])
def test_an_ipv4_mapped_answer_is_checked_as_its_ipv4_address():
    with Listener("127.0.0.1") as trap:
        script = Script(["::ffff:127.0.0.1"])
        with client(script) as http, pytest.raises(DeniedDestination):
            http.get(f"http://ci.mapped.test:{trap.port}/hook")
    assert trap.hosts == []


def test_a_name_that_does_not_resolve_is_never_called():
    script = Script(socket.gaierror(socket.EAI_NONAME, "Name or service not known"))
    with client(script) as http, pytest.raises(httpx.ConnectError, match="resolve"):
        http.get("http://ci.nowhere.test:9/hook")
    script = Script([])  # an empty answer is no address either
    with client(script) as http, pytest.raises(httpx.ConnectError, match="resolve"):
        http.get("http://ci.nowhere.test:9/hook")


def test_the_next_checked_address_is_tried_when_one_refuses():
    with Listener("127.0.0.1") as listener:
        script = Script(["127.0.0.3", "127.0.0.1"])  # nothing listens on 127.0.0.3
        with client(script) as http:
            assert http.get(f"http://ci.two.test:{listener.port}/").status_code == 200
    assert listener.hosts == [f"ci.two.test:{listener.port}"]


def _certificate(tmp_path, name: str):
    """A CA, and a certificate for ``name`` it signed: the server's chain (files) and the
    client's trust."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    chain = tmp_path / f"{name}.pem"
    chain.write_bytes(
        leaf.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(chain)
    trust = ssl.create_default_context(
        cadata=ca.public_bytes(serialization.Encoding.PEM).decode()
    )
    return server, trust


def test_tls_is_checked_and_named_for_the_urls_name_not_the_address(tmp_path):
    server, trust = _certificate(tmp_path, "ci-tls.test")
    with Listener("127.0.0.1", tls=server) as listener:
        script = Script(["127.0.0.1"])
        with client(script, verify=trust) as http:
            url = f"https://ci-tls.test:{listener.port}/hook"
            assert http.get(url).status_code == 200
    assert listener.server_names == ["ci-tls.test"]
    assert listener.hosts == [f"ci-tls.test:{listener.port}"]


def test_a_certificate_for_another_name_is_refused(tmp_path):
    server, trust = _certificate(tmp_path, "other.test")
    with Listener("127.0.0.1", tls=server) as listener:
        script = Script(["127.0.0.1"])
        with (
            client(script, verify=trust) as http,
            pytest.raises(httpx.ConnectError, match="certificate verify failed"),
        ):
            http.get(f"https://ci-tls.test:{listener.port}/hook")
    assert listener.hosts == []


def test_a_deadline_bounds_a_call_whose_every_read_is_quick():
    """A byte every 0.1 s, well within the client's 5 s read timeout: the call still ends
    at the deadline, the earlier of two nested ones."""
    with Trickler(part="body", interval=0.1, body_bytes=200) as trickler:
        script = Script(["127.0.0.1"])
        started = time.monotonic()
        with (
            client(script) as http,
            egress.deadline(0.6),
            egress.deadline(30),
            pytest.raises(httpx.ReadTimeout, match="deadline"),
        ):
            http.get(trickler.url.replace("127.0.0.1", "ci.slow.test")).read()
        took = time.monotonic() - started
    assert took < 0.6 + LATE_SECONDS < min(30, trickler.lasts()), took
