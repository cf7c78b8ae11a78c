"""Settings of the pipeline commands: flags over environment over a config file over defaults.

One place reads them so `run`, `replay` and `demo` agree.  Environment names
are ``WORKLOADMAP_`` + the upper-case setting (``WORKLOADMAP_BOOTSTRAP_SERVERS``);
the config file is YAML with the setting names as keys.  Secrets (the SASL
password, key files) are read from the environment or the file only, never
from flags (they would show in `ps`), and are never printed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

import click
import yaml

from workloadmap.catalog import records

SECRET = {"sasl_password"}


@dataclass
class Settings:
    bootstrap_servers: str = "127.0.0.1:9092"
    raw_topic: str = records.RAW_TOPIC
    workloads_topic: str = records.WORKLOADS_TOPIC
    transitions_topic: str = records.TRANSITIONS_TOPIC
    deadletter_topic: str = records.DEADLETTER_TOPIC
    definitions_topic: str = records.DEFINITIONS_TOPIC
    duckdb: str = "workloadmap.duckdb"
    client_id: str = "workloadmap"
    partitions: int = 3
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


def load(config_file: str | None, flags: dict) -> Settings:
    values: dict = {}
    if config_file:
        try:
            with open(config_file, encoding="utf-8") as fh:
                data = yaml.safe_load(fh) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise click.BadParameter(f"{config_file}: {exc}", param_hint="--config") from None
        if not isinstance(data, dict):
            raise click.BadParameter(f"{config_file}: expected a mapping of settings", param_hint="--config")
        known = {f.name for f in fields(Settings)}
        for key, value in data.items():
            name = str(key).replace("-", "_")
            if name not in known:
                raise click.BadParameter(f"{config_file}: unknown setting {key!r}", param_hint="--config")
            values[name] = value
    for f in fields(Settings):
        env = os.environ.get("WORKLOADMAP_" + f.name.upper())
        if env is not None:
            values[f.name] = env
    for name, value in flags.items():
        if value is not None and value != ():
            values[name] = value
    if "partitions" in values:
        values["partitions"] = int(values["partitions"])
    if isinstance(values.get("clusters"), str):    # environment: comma-separated
        values["clusters"] = [c for c in values["clusters"].split(",") if c.strip()]
    if "clusters" in values:
        values["clusters"] = tuple(values["clusters"] or ())
    return Settings(**values)


def settings_options(f):
    """The shared pipeline options; flags win over environment and config file."""
    for decl, name, help_text in reversed([
        ("--config", "config", "YAML file of settings (see README: Running the full stack)."),
        ("--bootstrap-servers", "bootstrap_servers", "Kafka bootstrap servers, host:port[,host:port]."),
        ("--duckdb", "duckdb", "DuckDB file of the warehouse."),
        ("--client-id", "client_id", "Kafka client id (prefix)."),
        ("--partitions", "partitions", "Partitions of topics the pipeline creates."),
        ("--security-protocol", "security_protocol", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."),
        ("--sasl-mechanism", "sasl_mechanism", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512."),
        ("--sasl-username", "sasl_username", "SASL user (the password comes from WORKLOADMAP_SASL_PASSWORD or --config)."),
    ]):
        f = click.option(decl, name, default=None, help=help_text,
                         type=int if name == "partitions" else str)(f)
    return f


def from_options(options: dict) -> Settings:
    config = options.pop("config", None)
    return load(config, options)
