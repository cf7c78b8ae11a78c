"""A real Kubernetes API server (kube-apiserver + etcd) for tests, without Docker.

Like controller-runtime's envtest: the upstream kube-apiserver and etcd, no controller
manager, no scheduler, no kubelet. Release binaries cannot be downloaded on our machines,
so ``tests/services/kube/`` is a small Go module whose two ``main`` packages call the
upstream commands (``app.NewAPIServerCommand()`` and ``etcdmain.Main``); ``build()``
compiles them once into ``~/.cache/workloadmap/kube-<version>/`` (GOMODCACHE in
``~/.cache/workloadmap/gomod``, GOCACHE Go's default ``~/.cache/go-build``) and rebuilds
only when go.mod, go.sum or the mains change (a stamp records their hash). A cold build
takes ~10 min on 2 cores and needs Go >= the ``go`` line of go.mod (1.26). Only the
standard library is used here.

Usage::

    from tests.services.kube_api import KubeAPIServer, CRD_DIR

    with KubeAPIServer(name="cluster-a") as kube:     # etcd + apiserver, waits for /readyz
        kube.apply_crds(sorted(CRD_DIR.glob("*.yaml")))
        kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": "ns1"}})
        use(kube.kubeconfig)                          # context "cluster-a", admin token
        token = kube.service_account_token("ns1", "reader")
        kube.kubeconfig_for_token(token, tmp / "reader.kubeconfig", "reader")
        kube.kill(); kube.restart()                   # apiserver only; etcd keeps the data
        kube.compact()                                # etcd compaction to the current revision

Command line (from the repository root)::

    python -m tests.services.kube_api build   # build the binaries if needed (progress lines;
                                              # nothing when WORKLOADMAP_NO_KUBE=1)
    python -m tests.services.kube_api run     # start one, print its kubeconfig, Ctrl-C stops

Everything a server writes (etcd data, the apiserver's generated serving certificate in
``certs/``, the service-account key, the token file, ``kubeconfig``, ``etcd.log`` and
``apiserver.log``) lives in a fresh temp dir that ``close()`` / leaving the ``with`` block
deletes. Errors carry the tail of both logs. If the Python process dies without stopping
the servers, a watchdog process per server process SIGKILLs it and deletes the temp dir.

Authentication and authorization: ``--token-auth-file`` holds one admin token (user
``admin``, group ``system:masters``), ``--authorization-mode=RBAC``; service-account
tokens come from the TokenRequest API (one RSA key signs and verifies them). The
kubeconfig trusts the self-signed serving certificate the apiserver generated in its
cert dir (its SANs include 127.0.0.1); there is no insecure-skip-tls-verify. No
controller manager runs: no garbage collection, namespaces never finish deleting, no
default service accounts, CRD objects get no status but what a test writes.

Watch cache, compaction and 410 Gone (measured on v1.36.3; tests/services/test_kube_api.py checks it):

* With the watch cache (the default, as in real clusters) watches and exact-version
  lists are served from the apiserver's memory: after ``compact()`` a watch from an
  older resourceVersion still replays every event since then, no 410, and a list with
  ``resourceVersion=<old>&resourceVersionMatch=Exact`` still answers. The cache keeps
  everything since it started: its size is dynamic now, so neither
  ``--default-watch-cache-size=10`` (1,000 updates later, the first was still replayed)
  nor ``--default-watch-cache-size=0`` (the cache stays on) produces a 410.
* A 410 comes from a resourceVersion older than what the cache holds. With the cache on,
  ``compact()`` then ``kill()`` + ``restart()`` gets there: the restarted apiserver's
  cache starts at the current revision (as after an apiserver restart in production),
  and a watch from an older version gets HTTP 200 with one ``ERROR`` event whose Status
  has code 410, reason ``Expired`` ("too old resource version: 203 (206)"); an exact
  list gets HTTP 410. The apiserver starts again in ~3-4 s.
* Without the cache the watch goes to etcd and gets the same ERROR event ("The
  resourceVersion for the provided watch is too old.") right after ``compact()``:
  ``KubeAPIServer(watch_cache=False)`` (``--watch-cache=false``, no BOOKMARK events then),
  or for chosen resources only ``extra_args=["--watch-cache-sizes=configmaps#0"]``
  (``<plural>.<group>#0`` for a custom resource); other resources keep their cache.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from pathlib import Path

from tests.services.go_building import GoProgram
from tests.services.processes import ServerProcess, free_ports, log_tails, make_workdir, remove_workdir

HERE = Path(__file__).resolve().parent / "kube"
CRD_DIR = HERE / "crds"
# The WorkloadMap CRD the project ships (applied as it is, not copied).
WORKLOADMAP_CRD = Path(__file__).resolve().parents[2] / "catalog" / "crd" / "workloadmap.io_workloadmaps.yaml"
BINARIES = ("etcd", "kube-apiserver")

ETCD_READY_TIMEOUT = 30.0  # seconds from start to GET /health answering {"health":"true"}
APISERVER_READY_TIMEOUT = 120.0  # seconds from start to GET /readyz answering "ok"
STOP_TIMEOUT = 20.0  # seconds after SIGTERM before SIGKILL
ADMIN_USER = "admin"
SERVICE_CIDR = "10.0.0.0/24"
SA_ISSUER = "https://kubernetes.default.svc"


class KubeAPIError(RuntimeError):
    """The binaries could not be built, or a server did not start / stop."""


class KubeHTTPError(KubeAPIError):
    """The API server answered a request with an HTTP error; ``status`` is the Status object."""

    def __init__(self, method: str, path: str, code: int, status: dict | str):
        self.code = code
        self.status = status
        reason = status.get("message", status) if isinstance(status, dict) else status
        super().__init__(f"{method} {path}: HTTP {code}: {reason}")


def _ldflags(version: str) -> str:
    major, minor = version.lstrip("v").split(".")[:2]
    sets = {
        "k8s.io/component-base/version.gitVersion": version,
        "k8s.io/component-base/version.gitMajor": major,
        "k8s.io/component-base/version.gitMinor": minor,
        "k8s.io/client-go/pkg/version.gitVersion": version,
    }
    return "-s -w " + " ".join(f"-X {k}={v}" for k, v in sets.items())


# the two upstream commands, built as tests/services/go_building.py builds every Go program
KUBE = GoProgram("kube", HERE, "k8s.io/kubernetes", ("./cmd/etcd", "./cmd/kube-apiserver"), BINARIES, _ldflags,
                 KubeAPIError, sources=("cmd/*/main.go",), cold="cold: ~10 min on 2 cores")


def kube_version() -> str:
    """The Kubernetes version pinned in go.mod (``v1.36.3``), the one source of truth."""
    return KUBE.version


def build(*, quiet: bool = False) -> Path:
    """Return the folder holding ``etcd`` and ``kube-apiserver``, building them if needed (progress
    lines on stderr unless ``quiet``): go.mod, go.sum and the mains are the sources."""
    return KUBE.build(quiet=quiet)


# --------------------------------------------------------------------------- helpers


def _rsa_key(path: Path) -> None:
    """One RSA private key (PEM): signs service-account tokens and verifies them."""
    openssl = shutil.which("openssl")
    if openssl:
        res = subprocess.run([openssl, "genrsa", "-out", str(path), "2048"],
                             capture_output=True, text=True)  # fmt: skip
        if res.returncode == 0:
            return
        raise KubeAPIError(f"openssl genrsa failed: {res.stderr.strip()}")
    try:  # the only non-stdlib path, and only when openssl is missing
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
    except ImportError as e:
        raise KubeAPIError("need openssl on PATH (or the cryptography package) to make an RSA key") from e
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.TraditionalOpenSSL,
                                       serialization.NoEncryption()))  # fmt: skip


def write_kubeconfig(path: str | os.PathLike, entries: Iterable[tuple[str, str, bytes, str]],
                     current: str | None = None) -> Path:  # fmt: skip
    """Write a kubeconfig with one context per ``(context, server, ca_pem, token)``.

    Cluster, user and context all take the context's name; the CA is embedded
    (certificate-authority-data). Written as JSON, which every kubeconfig loader reads
    (it is YAML too). The first context is current unless ``current`` names another.
    """
    entries = list(entries)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": ctx, "cluster": {
            "server": server, "certificate-authority-data": base64.b64encode(ca).decode()}}
            for ctx, server, ca, _ in entries],
        "users": [{"name": ctx, "user": {"token": token}} for ctx, _, _, token in entries],
        "contexts": [{"name": ctx, "context": {"cluster": ctx, "user": ctx}} for ctx, *_ in entries],
        "current-context": current or entries[0][0],
    }  # fmt: skip
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)
    return path


# --------------------------------------------------------------------------- server


def _json_or_text(raw: bytes):
    """An API answer parsed as JSON, or as text when it is not JSON (a Status, or a plain error)."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


class KubeAPIServer:
    """etcd + kube-apiserver on 127.0.0.1, in a fresh temp dir; a context manager.

    ``start()`` builds the binaries if needed, starts etcd (free client and peer ports,
    ``--unsafe-no-fsync``) and the apiserver (a free secure port), and returns once
    ``/readyz`` answers; it writes ``kubeconfig`` with context ``name`` and the admin token.
    ``kill()`` SIGKILLs the apiserver only, ``restart()`` starts it again on the same port,
    cert dir and etcd (objects survive), ``stop()`` stops both, ``close()`` also deletes
    the temp dir. ``timings`` holds the last start-to-ready seconds of each server.

    ``watch_cache=False`` passes ``--watch-cache=false`` (see the module docstring for what
    that changes about 410 Gone); ``extra_args`` are appended to the apiserver's flags.
    """

    def __init__(self, name: str = "envtest", *, watch_cache: bool = True,
                 extra_args: Iterable[str] = (),
                 ready_timeout: float = APISERVER_READY_TIMEOUT) -> None:  # fmt: skip
        self.name = name
        self.watch_cache = watch_cache
        self.extra_args = list(extra_args)
        self.ready_timeout = ready_timeout
        self.version = kube_version()
        self.admin_token = secrets.token_hex(24)
        self.workdir: Path | None = None
        self.port: int | None = None
        self.etcd_port: int | None = None
        self.etcd_peer_port: int | None = None
        self.timings: dict[str, float] = {}
        self._bins: Path | None = None
        self._etcd: ServerProcess | None = None
        self._apiserver: ServerProcess | None = None
        self._ssl: ssl.SSLContext | None = None

    # -- public API ---------------------------------------------------------------

    @property
    def server(self) -> str:
        if self.port is None:
            raise KubeAPIError("API server not started")
        return f"https://127.0.0.1:{self.port}"

    @property
    def etcd_url(self) -> str:
        if self.etcd_port is None:
            raise KubeAPIError("etcd not started")
        return f"http://127.0.0.1:{self.etcd_port}"

    @property
    def kubeconfig(self) -> Path:
        if self.workdir is None:
            raise KubeAPIError("API server not started")
        return self.workdir / "kubeconfig"

    @property
    def ca_file(self) -> Path:
        """The apiserver's self-signed serving certificate (chain), the kubeconfig's CA."""
        if self.workdir is None:
            raise KubeAPIError("API server not started")
        return self.workdir / "certs" / "apiserver.crt"

    @property
    def running(self) -> bool:
        return self._apiserver is not None and self._apiserver.running

    def start(self) -> KubeAPIServer:
        """Start etcd (first call) and the apiserver, waiting for each to be ready."""
        if self.running:
            return self
        if self.workdir is None:
            self._bins = build()
            self.workdir = make_workdir("workloadmap-kube-")
            (self.workdir / "certs").mkdir()
            _rsa_key(self.workdir / "sa.key")
            (self.workdir / "tokens.csv").write_text(
                f'{self.admin_token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n'
            )
            self.etcd_port, self.etcd_peer_port, self.port = free_ports(3)
        if self._etcd is None or not self._etcd.running:
            self._start_etcd()
        self._start_apiserver()
        if not self.kubeconfig.is_file():
            write_kubeconfig(self.kubeconfig, [self.kubeconfig_entry()])
        return self

    def kill(self) -> None:
        """SIGKILL the apiserver (no clean shutdown); etcd keeps running. ``restart()`` recovers."""
        if self._apiserver is not None:
            self._apiserver.kill()
            self._apiserver = None

    def restart(self) -> KubeAPIServer:
        """Stop the apiserver (if running) and start it again on the same port and etcd."""
        if self.workdir is None:
            return self.start()
        if self._apiserver is not None:
            self._apiserver.stop(STOP_TIMEOUT)
            self._apiserver = None
        return self.start()

    def stop(self) -> None:
        """Stop the apiserver, then etcd (SIGTERM, SIGKILL after ``STOP_TIMEOUT``)."""
        for attr in ("_apiserver", "_etcd"):
            proc = getattr(self, attr)
            if proc is not None:
                proc.stop(STOP_TIMEOUT)
                setattr(self, attr, None)

    def close(self) -> None:
        """Stop both servers and delete the temp dir (data, certs, logs, kubeconfig)."""
        self.stop()
        if self.workdir is not None:
            remove_workdir(self.workdir)
            self.workdir = None

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the apiserver's and etcd's logs."""
        if self.workdir is None:
            return ""
        tails = log_tails(self.workdir, ("apiserver.log", "etcd.log"), lines)
        return tails or f"(no server output in {self.workdir})"

    def kubeconfig_entry(self, token: str | None = None, context: str | None = None) -> tuple:
        """``(context, server, ca_pem, token)`` for ``write_kubeconfig`` (default: admin)."""
        return (context or self.name, self.server, self.ca_file.read_bytes(),
                token or self.admin_token)  # fmt: skip

    def kubeconfig_for_token(self, token: str, path: str | os.PathLike, context: str) -> Path:
        """Write a kubeconfig at ``path`` whose one context ``context`` uses ``token``."""
        return write_kubeconfig(path, [self.kubeconfig_entry(token, context)])

    def request(self, method: str, path: str, body=None, token: str | None = None, *,
                content_type: str = "application/json", timeout: float = 30.0):  # fmt: skip
        """One API request; returns the parsed JSON answer (text if it is not JSON).

        ``body``: a dict/list (sent as JSON), or str/bytes sent as ``content_type`` (e.g.
        ``application/yaml``, ``application/merge-patch+json``). ``token`` defaults to the
        admin's. HTTP errors raise ``KubeHTTPError`` (``.code``, ``.status``), except 429s
        with Retry-After, which are retried like client-go does.
        """
        data = None
        if body is not None:
            data = body.encode() if isinstance(body, str) else body
            if isinstance(body, (dict, list)):
                data = json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token or self.admin_token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with self._open(req, timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raise KubeHTTPError(method, path, e.code, _json_or_text(e.read())) from None
        return _json_or_text(raw)

    def watch(self, path: str, resource_version: str | None = None, *, timeout: float = 5.0,
              max_events: int | None = None, token: str | None = None,
              bookmarks: bool = False) -> list[dict]:  # fmt: skip
        """Watch ``path`` (a collection) from ``resource_version``; return the events.

        Reads until ``max_events`` events arrived, the server ended the stream, or
        ``timeout`` seconds passed without an event. A watch the server refuses
        outright raises ``KubeHTTPError``; one it accepts and then rejects (a too old
        resourceVersion) ends with an ``{"type": "ERROR", "object": <Status>}`` event.
        """
        params = {"watch": "1", "timeoutSeconds": str(max(1, int(timeout) + 1))}
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        if bookmarks:
            params["allowWatchBookmarks"] = "true"
        sep = "&" if "?" in path else "?"
        url = f"{self.server}{path}{sep}{urllib.parse.urlencode(params)}"
        req = urllib.request.Request(url, method="GET")
        req.add_header("Authorization", f"Bearer {token or self.admin_token}")
        events: list[dict] = []
        try:
            with self._open(req, timeout) as resp:
                while max_events is None or len(events) < max_events:
                    try:
                        line = resp.readline()
                    except (TimeoutError, socket.timeout):
                        break
                    if not line:
                        break
                    if line.strip():
                        events.append(json.loads(line))
                        if events[-1].get("type") == "ERROR":
                            break
        except urllib.error.HTTPError as e:
            raise KubeHTTPError("WATCH", path, e.code, _json_or_text(e.read())) from None
        return events

    def compact(self) -> int:
        """Compact etcd to its current revision (physically); return that revision.

        Through etcd's gRPC gateway (JSON): ``/v3/maintenance/status`` gives the current
        revision, ``/v3/kv/compaction`` compacts to it. Every older resourceVersion is then
        gone from etcd (whether a watch from one gets 410: see the module docstring).
        """
        status = self._etcd_post("/v3/maintenance/status", {})
        revision = int(status["header"]["revision"])
        self._etcd_post("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def apply_crds(self, paths: Iterable[str | os.PathLike], timeout: float = 60.0) -> list[str]:
        """Create each CRD (one YAML document per file), wait until all are Established.

        The YAML goes to the apiserver as it is (``application/yaml``); a CRD that already
        exists is server-side applied instead. Returns the CRD names. A CRD is also waited
        for until its storage version's list answers, so objects can be created right away.
        """
        names: dict[str, tuple[str, str]] = {}
        base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        for path in paths:
            text = Path(path).read_bytes()
            try:
                crd = self.request("POST", base, text, content_type="application/yaml")
            except KubeHTTPError as e:
                if e.code != 409 or not isinstance(e.status, dict):
                    raise KubeAPIError(f"creating the CRD in {path} failed: {e}") from None
                name = e.status.get("details", {}).get("name")
                crd = self.request("PATCH", f"{base}/{name}?fieldManager=workloadmap-tests&force=true",
                                   text, content_type="application/apply-patch+yaml")  # fmt: skip
            spec = crd["spec"]
            storage = next(v["name"] for v in spec["versions"] if v.get("storage"))
            names[crd["metadata"]["name"]] = (f"/apis/{spec['group']}/{storage}/{spec['names']['plural']}",
                                              spec["scope"])  # fmt: skip
        deadline = time.monotonic() + timeout
        for name, (list_path, _scope) in names.items():
            while True:
                crd = self.request("GET", f"{base}/{name}")
                conditions = {c["type"]: c for c in (crd.get("status") or {}).get("conditions") or []}
                established = conditions.get("Established", {}).get("status") == "True"
                if established:
                    try:
                        self.request("GET", f"{list_path}?limit=1")
                        break
                    except KubeHTTPError as e:
                        if e.code != 404:
                            raise
                if time.monotonic() > deadline:
                    raise KubeAPIError(f"CRD {name} not established after {timeout:.0f} s: "
                                       f"{json.dumps(list(conditions.values()))}")  # fmt: skip
                time.sleep(0.1)
        return list(names)

    def ensure(self, path: str, obj: dict) -> dict:
        """POST ``obj`` to the collection ``path`` unless it exists; return the object."""
        try:
            return self.request("POST", path, obj)
        except KubeHTTPError as e:
            if e.code != 409:
                raise
            return self.request("GET", f"{path}/{obj['metadata']['name']}")

    def service_account_token(self, namespace: str, name: str, *,
                              expiration_seconds: int = 3600) -> str:  # fmt: skip
        """A token for ServiceAccount ``namespace/name`` (created, with its namespace, if missing).

        From the TokenRequest API (``POST .../serviceaccounts/{name}/token``); the token
        authenticates as ``system:serviceaccount:<namespace>:<name>`` and has no rights
        until a test binds a role to it.
        """
        self.ensure("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": namespace}})  # fmt: skip
        sa_path = f"/api/v1/namespaces/{namespace}/serviceaccounts"
        self.ensure(sa_path, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})
        answer = self.request("POST", f"{sa_path}/{name}/token", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_seconds},
        })  # fmt: skip
        return answer["status"]["token"]

    def __enter__(self) -> KubeAPIServer:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<KubeAPIServer {self.name} {self.version} {state} port={self.port} dir={self.workdir}>"

    # -- internals ----------------------------------------------------------------

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context(cafile=str(self.ca_file))
        return self._ssl

    def _open(self, req: urllib.request.Request, timeout: float):
        """urlopen, retrying 429s that carry Retry-After as client-go does (up to 10 times):
        right after a (re)start the apiserver answers 429 "storage is (re)initializing"
        for a custom resource until its watch cache is filled."""
        for attempt in range(10):
            try:
                return urllib.request.urlopen(req, context=self._ssl_context(), timeout=timeout)
            except urllib.error.HTTPError as e:
                retry_after = e.headers.get("Retry-After") if e.code == 429 else None
                if retry_after is None or attempt == 9:
                    raise
                e.close()
                time.sleep(min(max(float(retry_after), 0.1), 1.0))
        raise AssertionError("unreachable")

    def _etcd_post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(self.etcd_url + path, data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            raise KubeAPIError(f"etcd {path}: HTTP {e.code}: {e.read().decode(errors='replace')}") from None

    def _start_etcd(self) -> None:
        assert self.workdir is not None and self._bins is not None
        client, peer = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{self.etcd_peer_port}"
        cmd = [
            str(self._bins / "etcd"), "--name=default", f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}", "--initial-cluster-state=new",
            "--unsafe-no-fsync", "--log-level=warn",
        ]  # fmt: skip
        started = time.monotonic()
        self._etcd = ServerProcess("etcd", cmd, self.workdir / "etcd.log", self.workdir)
        deadline = started + ETCD_READY_TIMEOUT
        last: object = None
        while True:
            if not self._etcd.running:
                code = self._etcd.proc.returncode
                self._etcd.kill()
                raise KubeAPIError(f"etcd exited with code {code} while starting "
                                   f"(client port {self.etcd_port})\n" + self.log_tail())  # fmt: skip
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=2) as resp:
                    last = json.loads(resp.read())
                if last.get("health") == "true":
                    break
            except (OSError, ValueError) as e:
                last = e
            if time.monotonic() > deadline:
                self._etcd.kill()
                raise KubeAPIError(f"etcd not healthy after {ETCD_READY_TIMEOUT:.0f} s on {client} "
                                   f"(last probe: {last!r})\n" + self.log_tail())  # fmt: skip
            time.sleep(0.05)
        self.timings["etcd"] = time.monotonic() - started

    def _apiserver_cmd(self) -> list[str]:
        assert self.workdir is not None and self._bins is not None
        w = self.workdir
        return [
            str(self._bins / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}", f"--cert-dir={w / 'certs'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={w / 'sa.key'}",
            f"--service-account-signing-key-file={w / 'sa.key'}",
            f"--token-auth-file={w / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true",
            "--profiling=false",
            # The default (lease) reconciler writes the `kubernetes` Service's endpoints with
            # the advertise address, which validation refuses for 127.0.0.1: an error in the
            # log every 10 s. Nothing in the tests needs those endpoints.
            "--endpoint-reconciler-type=none",
            *([] if self.watch_cache else ["--watch-cache=false"]),
            *self.extra_args,
        ]  # fmt: skip

    def _start_apiserver(self) -> None:
        assert self.workdir is not None
        started = time.monotonic()
        self._apiserver = ServerProcess("kube-apiserver", self._apiserver_cmd(),
                                        self.workdir / "apiserver.log", self.workdir)  # fmt: skip
        deadline = started + self.ready_timeout
        last: object = None
        while True:
            if not self._apiserver.running:
                code = self._apiserver.proc.returncode
                self.kill()
                raise KubeAPIError(f"kube-apiserver {self.version} exited with code {code} while "
                                   f"starting (port {self.port})\n" + self.log_tail())  # fmt: skip
            if self.ca_file.is_file():
                try:
                    self._ssl = None  # (re)read the CA: the apiserver may have just written it
                    if self.request("GET", "/readyz", timeout=5) == "ok":
                        break
                except (OSError, KubeHTTPError, ssl.SSLError) as e:
                    last = e
            if time.monotonic() > deadline:
                self.kill()
                raise KubeAPIError(f"kube-apiserver {self.version} not ready after "
                                   f"{self.ready_timeout:.0f} s on {self.server} (last probe: {last!r})\n"
                                   + self.log_tail())  # fmt: skip
            time.sleep(0.1)
        self.timings["apiserver"] = time.monotonic() - started


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m tests.services.kube_api",
        description="Real kube-apiserver + etcd (built from the Go module proxy) for tests.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build etcd and kube-apiserver into the cache if needed")
    run = sub.add_parser("run", help="start one, print its kubeconfig path, Ctrl-C stops")
    run.add_argument("--name", default="envtest", help="kubeconfig context name (default envtest)")
    run.add_argument("--no-crds", action="store_true", help="do not apply the framework CRDs")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            if os.environ.get("WORKLOADMAP_NO_KUBE", "") == "1":
                print("kube: WORKLOADMAP_NO_KUBE=1, not building", file=sys.stderr)
                return 0
            folder = build()
            print(folder, flush=True)
            return 0
        # Ctrl-C (even if a parent shell ignored SIGINT) and `kill` both stop the servers.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        with KubeAPIServer(name=args.name) as kube:
            if not args.no_crds:
                kube.apply_crds([*sorted(CRD_DIR.glob("*.yaml")), WORKLOADMAP_CRD])
            print(kube.kubeconfig, flush=True)
            print(f"(kube-apiserver {kube.version} at {kube.server}, etcd at {kube.etcd_url}, "
                  f"context {kube.name}, files in {kube.workdir}; Ctrl-C stops)",
                  file=sys.stderr, flush=True)  # fmt: skip
            try:
                while kube.running:
                    time.sleep(0.5)
            except KeyboardInterrupt:
                return 0
            print("kube-apiserver exited\n" + kube.log_tail(), file=sys.stderr)
            return 1
    except KubeAPIError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
