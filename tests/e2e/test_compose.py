"""docker-compose.yml cannot run here (no Docker engine); check that it describes a real stack."""

from __future__ import annotations

from pathlib import Path

import click
import yaml

from workloadmap.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]


def _resolve_command(argv):
    """The click command an argv names, or raise."""
    assert argv[0] == "workloadmap", argv
    ctx = click.Context(cli)
    command, args = cli, list(argv[1:])
    while isinstance(command, click.Group):
        name = args.pop(0)
        command = command.get_command(ctx, name)
        assert command is not None, f"no command {name!r} in {argv}"
    params = {opt for p in command.params for opt in getattr(p, "opts", [])}
    for arg in args:
        if arg.startswith("--"):
            assert arg in params, f"{argv}: unknown option {arg}"
    return command


def test_every_service_runs_a_real_workloadmap_command():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"kafka", "watchers", "processors", "warehouse", "exporter", "prometheus"} <= set(services)
    for name, service in services.items():
        if "build" in service:
            _resolve_command(service["command"])
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"


def test_dockerfile_installs_the_package():
    text = (ROOT / "Dockerfile").read_text()
    assert "pip install" in text and "COPY . ." in text
