"""Connecting to clusters: a kubeconfig context (or in-cluster credentials) per cluster id.

Why our own thin layer over the official client: the watchers and the live
commands read raw JSON (the catalog resolves plain dicts, and the typed models
of the `kubernetes` package would cost a deserialisation per object and drop
custom resources' fields), page through lists and stream watch lines.  The
`kubernetes` package still does everything security-sensitive: kubeconfig
parsing, TLS, client certificates, tokens, exec/auth-provider plugins and
their refresh.  Credentials never leave the `ApiClient`: nothing here logs
headers, and `repr` of a cluster names only its id, context and server.

Cluster specs (``--cluster ID=SOURCE``) name where the credentials come from:

- ``ID=CONTEXT``: a context of the kubeconfig (``--kubeconfig`` or the usual
  ``$KUBECONFIG`` / ``~/.kube/config``);
- ``ID=FILE`` or ``ID=FILE#CONTEXT``: a kubeconfig file (its current context,
  or the one named);
- ``ID=in-cluster``: the pod's service account (the watcher deployed in the cluster).
"""

from __future__ import annotations

import json
import os
from urllib.parse import urlencode
from collections.abc import Iterator
from dataclasses import dataclass

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException
from urllib3 import Timeout
from urllib3.exceptions import HTTPError as TransportError

from workloadmap.catalog import records

IN_CLUSTER = "in-cluster"
POOL_SIZE = 64


class ClusterConfigError(ValueError):
    """A cluster spec or kubeconfig that cannot be used (the message names which and why)."""


class ApiError(Exception):
    """The API server answered with an error status (or could not be reached: status 0)."""

    def __init__(self, status: int, reason: str, message: str = "", path: str = ""):
        self.status = status
        self.reason = reason
        self.message = message
        self.path = path
        where = f" {path}" if path else ""
        super().__init__(f"{status} {reason}{where}: {message}" if message else f"{status} {reason}{where}")

    @property
    def gone(self) -> bool:
        """410 Gone: the resourceVersion asked for is compacted away: relist."""
        return self.status == 410


@dataclass(frozen=True)
class ClusterSpec:
    id: str
    kubeconfig: str | None = None   # None: the default kubeconfig
    context: str | None = None      # None: the kubeconfig's current context
    in_cluster: bool = False

    @classmethod
    def parse(cls, text: str, kubeconfig: str | None = None) -> "ClusterSpec":
        """``ID=CONTEXT``, ``ID=FILE[#CONTEXT]`` or ``ID=in-cluster`` (see the module docstring)."""
        cluster_id, sep, source = text.partition("=")
        cluster_id, source = cluster_id.strip(), source.strip()
        if not sep or not cluster_id or not source:
            raise ClusterConfigError(f"cluster {text!r}: expected ID=CONTEXT, ID=FILE[#CONTEXT] or ID=in-cluster")
        if source == IN_CLUSTER:
            return cls(cluster_id, in_cluster=True)
        path, _, context = source.partition("#")
        if os.path.isfile(os.path.expanduser(path)):
            return cls(cluster_id, os.path.expanduser(path), context or None)
        if context:
            raise ClusterConfigError(f"cluster {cluster_id!r}: kubeconfig file {path!r} does not exist")
        return cls(cluster_id, kubeconfig, source)


def connect(spec: ClusterSpec) -> "Cluster":
    """A client for one cluster; ClusterConfigError names the cluster and what is wrong."""
    configuration = k8s_client.Configuration()
    try:
        if spec.in_cluster:
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            k8s_config.load_kube_config(config_file=spec.kubeconfig, context=spec.context,
                                        client_configuration=configuration, persist_config=False)
    except (ConfigException, OSError, TypeError, KeyError) as exc:
        source = "in-cluster service account" if spec.in_cluster else (
            f"context {spec.context!r} of {spec.kubeconfig or 'the default kubeconfig'}" if spec.context
            else f"current context of {spec.kubeconfig or 'the default kubeconfig'}")
        raise ClusterConfigError(f"cluster {spec.id!r}: cannot use the {source}: {exc}") from None
    # one long-lived watch connection per watched kind, plus lists: more than the default 10
    configuration.connection_pool_maxsize = POOL_SIZE
    return Cluster(spec, k8s_client.ApiClient(configuration))


def current_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace a kubeconfig context sets (kubectl's default for `-n`), else "default"."""
    try:
        contexts, active = k8s_config.list_kube_config_contexts(config_file=kubeconfig)
    except (ConfigException, OSError, TypeError):
        return "default"
    chosen = active
    if context:
        chosen = next((c for c in contexts if c.get("name") == context), None) or {}
    return ((chosen or {}).get("context") or {}).get("namespace") or "default"


class Cluster:
    """One API server: JSON GETs, paged lists and watch streams of raw objects."""

    def __init__(self, spec: ClusterSpec, api: k8s_client.ApiClient):
        self.spec = spec
        self.id = spec.id
        self.api = api

    @property
    def server(self) -> str:
        return self.api.configuration.host

    def __repr__(self):
        return f"Cluster(id={self.id!r}, context={self.spec.context!r}, server={self.server!r})"

    def close(self) -> None:
        self.api.close()

    # -- requests -------------------------------------------------------------
    def _headers(self, accept: str) -> dict:
        headers = {"Accept": accept, "Content-Type": "application/json", "User-Agent": "workloadmap"}
        # the client's own auth settings: static tokens, and exec/auth-provider tokens it refreshes
        for setting in self.api.configuration.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        return headers

    def _call(self, method: str, path: str, params: dict | None, *, body=None, timeout: float = 60.0,
              accept: str = "application/json"):
        """One request through the client's TLS-configured pool; raises ApiError on an error status."""
        query = urlencode([(k, v) for k, v in (params or {}).items() if v is not None])
        url = f"{self.server}{path}?{query}" if query else f"{self.server}{path}"
        try:
            response = self.api.rest_client.pool_manager.request(
                method, url, body=None if body is None else json.dumps(body).encode(),
                headers=self._headers(accept), timeout=Timeout(connect=15.0, read=timeout),
                preload_content=False, retries=False)
        except (TransportError, OSError) as exc:
            raise ApiError(0, "Unreachable", f"{self.server}: {exc.__class__.__name__}", path) from None
        if response.status >= 400:
            try:
                data = response.data
            finally:
                response.release_conn()
            raise _api_error(response.status, response.reason, data, path)
        return response

    def get(self, path: str, params: dict | None = None, *, timeout: float = 60.0,
            accept: str = "application/json") -> dict:
        response = self._call("GET", path, params, timeout=timeout, accept=accept)
        try:
            return records.decode(response.data)
        finally:
            response.release_conn()

    def request(self, method: str, path: str, body=None, params: dict | None = None, *,
                timeout: float = 60.0) -> dict:
        response = self._call(method, path, params, body=body, timeout=timeout)
        try:
            return records.decode(response.data)
        finally:
            response.release_conn()

    def list_pages(self, path: str, params: dict | None = None, *, chunk_size: int = 500,
                   timeout: float = 120.0) -> Iterator[dict]:
        """Each page of a list (``limit`` + ``continue``), as the API server's list object."""
        token = None
        while True:
            page = self.get(path, {**(params or {}), "limit": chunk_size or None, "continue": token},
                            timeout=timeout)
            yield page
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    def watch(self, path: str, params: dict, *, timeout: float) -> "WatchStream":
        """A watch request: iterate its lines (one JSON watch event each) until the server ends it."""
        response = self._call("GET", path, {**params, "watch": "true"}, timeout=timeout)
        return WatchStream(response, self.server, path)


class WatchStream:
    """The lines of a watch response; `shutdown()` from another thread ends a blocked read."""

    def __init__(self, response, server: str, path: str):
        self.response = response
        self.server = server
        self.path = path

    def __iter__(self) -> Iterator[bytes]:
        pending = b""
        try:
            for chunk in self.response.stream(64 * 1024, decode_content=True):
                pending += chunk
                while True:
                    line, sep, rest = pending.partition(b"\n")
                    if not sep:
                        break
                    pending = rest
                    if line.strip():
                        yield line
            if pending.strip():
                yield pending
        except (TransportError, OSError) as exc:
            raise ApiError(0, "Unreachable", f"{self.server}: watch broke: {exc.__class__.__name__}",
                           self.path) from None
        finally:
            self.response.release_conn()

    def shutdown(self) -> None:
        self.response.shutdown()


def _api_error(status: int, reason: str | None, body: bytes, path: str) -> ApiError:
    message = ""
    try:
        message = json.loads(body or b"{}").get("message") or ""
    except (ValueError, TypeError, AttributeError):
        message = (body or b"")[:300].decode("utf-8", "replace")
    return ApiError(status, reason or "Error", message, path)
