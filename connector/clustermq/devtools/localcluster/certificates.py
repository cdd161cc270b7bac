"""A throw-away CA and broker certificate for a local TLS cluster, made with Java's ``keytool``.

``clustermq cluster up --tls`` needs a certificate the brokers present and a CA the clients
trust. The brokers need Java anyway and ``keytool`` ships with every JDK, so no Python crypto
package is needed: keytool makes the CA, signs the broker's key with it, and exports the CA as
PEM (``-rfc``) for Python's ``ssl`` module (the connector's ``sslCaFile``).

The broker certificate names ``localhost`` and ``127.0.0.1`` (subjectAltName), so clients that
verify the host name -- the connector does by default -- accept it on the loopback addresses
the local cluster listens on.

Keystore passwords are secrets: they are derived from the cluster password (so ``cluster.json``
keeps one secret), handed to keytool through the environment (``-storepass:env``, never on a
command line that ``ps`` shows), and never printed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from clustermq.devtools.localcluster.harness_paths import jdk_tool

TLS_DIR = "tls"
VALIDITY_DAYS = 825
KEY_SIZE = 2048
BROKER_SAN = "SAN=dns:localhost,ip:127.0.0.1"
_PASS_ENV = "CLUSTERMQ_KEYSTORE_PASSWORD"
# Every keytool call is a short-lived JVM: C1 only and the serial GC start it about 40 % faster.
_FAST_JVM = ("-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC")


class TlsSetupError(RuntimeError):
    """keytool failed; the message holds its output (which never contains the password)."""


@dataclass(frozen=True)
class TlsFiles:
    """Where a cluster's TLS material lives (``<cluster dir>/tls``)."""

    directory: Path

    @property
    def ca_pem(self) -> Path:
        """The CA certificate in PEM: what clients pass as ``sslCaFile``."""
        return self.directory / "ca.pem"

    @property
    def ca_keystore(self) -> Path:
        """The CA's private key (PKCS12); only needed to sign, kept for re-issuing."""
        return self.directory / "ca.p12"

    @property
    def keystore(self) -> Path:
        """The brokers' key and certificate chain (PKCS12)."""
        return self.directory / "broker.p12"

    @property
    def broker_pem(self) -> Path:
        return self.directory / "broker.pem"


def keystore_password(cluster_password: str) -> str:
    """The keystores' password, derived from the cluster password (never stored on its own)."""
    return hashlib.sha256(("clustermq-keystore:" + cluster_password).encode()).hexdigest()[:32]


def keytool_executable() -> str:
    """``$JAVA_HOME/bin/keytool`` when set, else ``keytool`` from PATH."""
    found = jdk_tool("keytool")
    if found is None:
        raise TlsSetupError("no 'keytool' on PATH and JAVA_HOME is not set: TLS needs a JDK")
    return found


def _keytool(password: str, *args: str) -> None:
    env = dict(os.environ, **{_PASS_ENV: password})
    done = subprocess.run(
        [keytool_executable(), *_FAST_JVM, *args], env=env, capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        output = (done.stdout + done.stderr).replace(password, "***").strip()
        raise TlsSetupError(f"keytool {args[0]} failed (exit {done.returncode}): {output}")


def _store(path: Path) -> list[str]:
    return ["-keystore", str(path), "-storetype", "PKCS12", "-storepass:env", _PASS_ENV]


def generate_ca(directory: Path, password: str, name: str = "clustermq local CA") -> Path:
    """Make a self-signed CA in ``directory`` (``ca.p12`` + ``ca.pem``); return the PEM path.

    Also used on its own by tests that need a second, unrelated CA.
    """
    files = TlsFiles(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for old in (files.ca_keystore, files.ca_pem):
        old.unlink(missing_ok=True)
    _keytool(password, "-genkeypair", "-alias", "ca", "-keyalg", "RSA", "-keysize", str(KEY_SIZE),
             "-validity", str(VALIDITY_DAYS), "-dname", f"CN={name}",
             "-ext", "bc:c", "-ext", "KeyUsage:critical=keyCertSign,cRLSign",
             *_store(files.ca_keystore))
    _keytool(password, "-exportcert", "-rfc", "-alias", "ca", "-file", str(files.ca_pem),
             *_store(files.ca_keystore))
    return files.ca_pem


def generate_cluster_tls(directory: Path, password: str) -> TlsFiles:
    """A CA (``ca.pem``) and a broker keystore signed by it (SAN localhost/127.0.0.1).

    Everything in ``directory`` is replaced: a new cluster gets a new CA, like a new password.
    """
    files = TlsFiles(directory)
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    directory.chmod(0o700)
    csr = directory / "broker.csr"
    # The CA and the broker's key pair are independent: make them side by side (each keytool
    # is a JVM start, seconds on a loaded machine).
    with ThreadPoolExecutor(max_workers=2) as pool:
        ca = pool.submit(generate_ca, directory, password)
        key = pool.submit(
            _keytool, password, "-genkeypair", "-alias", "broker", "-keyalg", "RSA",
            "-keysize", str(KEY_SIZE), "-validity", str(VALIDITY_DAYS), "-dname", "CN=localhost",
            "-ext", BROKER_SAN, *_store(files.keystore),
        )
        ca.result()
        key.result()
    _keytool(password, "-certreq", "-alias", "broker", "-file", str(csr), *_store(files.keystore))
    _keytool(password, "-gencert", "-alias", "ca", "-infile", str(csr), "-outfile", str(files.broker_pem),
             "-rfc", "-validity", str(VALIDITY_DAYS), "-ext", BROKER_SAN,
             "-ext", "KeyUsage:critical=digitalSignature,keyEncipherment",
             "-ext", "ExtendedKeyUsage=serverAuth", *_store(files.ca_keystore))
    # The chain: the CA first (so the reply can be linked to it), then the signed certificate.
    _keytool(password, "-importcert", "-noprompt", "-alias", "ca", "-file", str(files.ca_pem),
             *_store(files.keystore))
    _keytool(password, "-importcert", "-noprompt", "-alias", "broker", "-file", str(files.broker_pem),
             *_store(files.keystore))
    csr.unlink(missing_ok=True)
    for path in (files.ca_keystore, files.keystore):
        path.chmod(0o600)
    return files
