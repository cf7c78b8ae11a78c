"""Settings of the pipeline services: given values over environment over a config file over defaults.

One place reads them so the services (`running.py`), `replay`, `feed` and a
program embedding them agree.  Environment names are ``WORKLOADMAP_`` + the
upper-case setting (``WORKLOADMAP_BOOTSTRAP_SERVERS``); the config file is
YAML with the setting names as keys.  Secrets (the SASL password, key files)
are read from the environment or the file only, never from flags (they would
show in `ps`), and are never printed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, fields

import yaml

from workloadmap.catalog import records

SECRET = {"sasl_password", "serve_token"}


# The one warehouse file every command defaults to: `demo` (and `make demo`) writes it, the
# analytics commands read it, the writer and the embedded watchers write it.
DEFAULT_DUCKDB = "workloadmap.duckdb"

class SettingsError(ValueError):
    """A config file that cannot be read, is not a mapping of settings, or names an unknown one."""


@dataclass
class Settings:
    bootstrap_servers: str = "127.0.0.1:9092"
    raw_topic: str = records.RAW_TOPIC
    workloads_topic: str = records.WORKLOADS_TOPIC
    transitions_topic: str = records.TRANSITIONS_TOPIC
    deadletter_topic: str = records.DEADLETTER_TOPIC
    definitions_topic: str = records.DEFINITIONS_TOPIC
    pods_topic: str = records.PODS_TOPIC
    nodes_topic: str = records.NODES_TOPIC
    state_topic: str = records.STATE_TOPIC      # the processors' state (compacted, internal)
    duckdb: str = DEFAULT_DUCKDB
    pricing: str | None = None                # pricing file the warehouse writer keeps the daily cost rows with
    duckdb_memory_limit: str | None = None    # DuckDB's memory bound in the warehouse writer (2GB ...; None: 80% of RAM)
    client_id: str = "workloadmap"
    partitions: int = 3
    broker_wait: float = 120.0                # seconds a service waits for the broker at its start (0: fail at once)
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    # the watchers (`run watchers`)
    clusters: tuple[str, ...] = ()            # ID=CONTEXT | ID=FILE[#CONTEXT] | ID=in-cluster
    kubeconfig: str | None = None
    checkpoint_dir: str = "workloadmap-watchers"
    # the fresh reads over HTTP (`run warehouse --serve`): the bearer token they require, given
    # as itself (environment or config file only) or as a file holding it (a mounted Secret)
    serve_token: str | None = None
    serve_token_file: str | None = None

    def read_token(self) -> str | None:
        """The bearer token of the HTTP reads: ``serve_token``, else the first line of
        ``serve_token_file``; None when neither is set.  SettingsError for an unreadable or empty file."""
        if self.serve_token:
            return self.serve_token
        if not self.serve_token_file:
            return None
        try:
            with open(self.serve_token_file, encoding="utf-8") as fh:
                token = fh.readline().strip()
        except OSError as exc:
            raise SettingsError(f"serve_token_file {self.serve_token_file}: {exc.strerror}") from None
        if not token:
            raise SettingsError(f"serve_token_file {self.serve_token_file}: the file is empty")
        return token

    def security(self) -> dict:
        """kafka-python style security options (empty for PLAINTEXT)."""
        if self.security_protocol.upper() == "PLAINTEXT":
            return {}
        out = {"security_protocol": self.security_protocol.upper()}
        for key, option in (("sasl_mechanism", "sasl_mechanism"), ("sasl_username", "sasl_plain_username"),
                            ("sasl_password", "sasl_plain_password"), ("ssl_cafile", "ssl_cafile"),
                            ("ssl_certfile", "ssl_certfile"), ("ssl_keyfile", "ssl_keyfile")):
            if getattr(self, key):
                out[option] = getattr(self, key)
        return out

    def public(self) -> dict:
        """The settings without secrets, for logs and `--show-settings`."""
        return {f.name: ("***" if f.name in SECRET and getattr(self, f.name) else getattr(self, f.name))
                for f in fields(self)}


def load(config_file: str | None = None, given: dict | None = None) -> Settings:
    """The settings: `given` values (None or () means not given) over the environment over
    `config_file` over the defaults.  Raises SettingsError for a config file that is not one."""
    values: dict = {}
    if config_file:
        try:
            with open(config_file, encoding="utf-8") as fh:
                data = yaml.safe_load(fh) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise SettingsError(f"{config_file}: {exc}") from None
        if not isinstance(data, dict):
            raise SettingsError(f"{config_file}: expected a mapping of settings")
        known = {f.name for f in fields(Settings)}
        for key, value in data.items():
            name = str(key).replace("-", "_")
            if name not in known:
                raise SettingsError(f"{config_file}: unknown setting {key!r}")
            values[name] = value
    for f in fields(Settings):
        env = os.environ.get("WORKLOADMAP_" + f.name.upper())
        if env is not None:
            values[f.name] = env
    for name, value in (given or {}).items():
        if value is not None and value != ():
            values[name] = value
    if "partitions" in values:
        values["partitions"] = int(values["partitions"])
    if "broker_wait" in values:
        values["broker_wait"] = float(values["broker_wait"])
    if isinstance(values.get("clusters"), str):    # environment: comma-separated
        values["clusters"] = [c for c in values["clusters"].split(",") if c.strip()]
    if "clusters" in values:
        values["clusters"] = tuple(values["clusters"] or ())
    return Settings(**values)


class BrokerUnavailable(RuntimeError):
    """No Kafka broker answers at the bootstrap servers."""


def check_broker(settings: Settings, timeout: float = 5.0) -> None:
    """Fail at once, with one line, when no bootstrap server accepts a connection.

    Why: the Kafka clients retry a broker that is not there for their whole request timeout
    (`replay` sat 31 s in silence, then printed 40 lines of traceback).  A TCP connection to
    one of the bootstrap servers is what any client needs first; past it, the clients' own
    retries are about a broker that exists."""
    import socket

    reasons = []
    for server in [s.strip() for s in settings.bootstrap_servers.split(",") if s.strip()]:
        host, _, port = server.rpartition(":")
        host = host.strip("[]") or "localhost"
        try:
            with socket.create_connection((host, int(port)), timeout=timeout):
                return
        except (OSError, ValueError) as exc:
            reasons.append(f"{server}: {getattr(exc, 'strerror', None) or exc}")
    raise BrokerUnavailable(f"no Kafka broker at {settings.bootstrap_servers} ({'; '.join(reasons) or 'no servers'})"
                            f"; start one (`docker compose up -d kafka`) or give --bootstrap-servers")


def wait_for_broker(settings: Settings, within: float, *, say=None) -> None:
    """``check_broker``, tried again with a growing pause (0.5 s doubling up to 8 s) for up to
    `within` seconds, then BrokerUnavailable.

    Why: a service started while its broker restarts (a kubelet restarting both, a broker
    upgrade) would otherwise exit at once and be restarted in a loop that says nothing useful;
    a bounded wait rides out a restart and still fails, with the same one line, when there is
    no broker.  `say` is told each wait (a line for the log)."""
    deadline = time.monotonic() + within
    pause = 0.5
    while True:
        try:
            check_broker(settings)
            return
        except BrokerUnavailable as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            if say is not None:
                say(f"{exc}: trying again in {min(pause, left):.1f} s")
            time.sleep(min(pause, left))
            pause = min(pause * 2, 8.0)
