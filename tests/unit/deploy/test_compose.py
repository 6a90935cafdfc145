"""compose.yaml: valid against the Compose Specification's own JSON schema (tests/data/compose-spec.json, vendored
with its commit in tests/data/README.md), and it runs what a deployment needs: every gpuplace service with the
command `gpuplace service NAME`, after the migration and topic jobs have completed, with the database password
only in the compose secret file."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gpuplace.cli.services import SERVICES
from gpuplace.settings import Settings

ROOT = Path(__file__).resolve().parents[3]
COMPOSE = ROOT / "compose.yaml"
SCHEMA = ROOT / "tests" / "data" / "compose-spec.json"
JOBS = {"migrate": ["gpuplace", "migrate"], "topics": ["gpuplace", "topics"]}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_matches_the_compose_specification_schema(compose: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []


def test_the_schema_check_rejects_what_compose_would(compose: dict[str, Any]) -> None:
    """The vendored schema does catch mistakes: an unknown service key, a wrong depends_on condition."""
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    broken = json.loads(json.dumps(compose))
    broken["services"]["placement"]["comand"] = ["typo"]
    broken["services"]["telemetry-ingest"]["depends_on"]["migrate"]["condition"] = "service_done"
    assert len(list(validator.iter_errors(broken))) == 2


def test_every_service_runs_with_its_command_after_the_jobs(compose: dict[str, Any]) -> None:
    services = compose["services"]
    image = services["migrate"]["image"]
    for name in SERVICES:
        assert name in services, f"compose.yaml has no service {name}"
        service = services[name]
        assert service["command"] == ["gpuplace", "service", name]
        assert service["image"] == image
        for job in JOBS:
            assert service["depends_on"][job] == {"condition": "service_completed_successfully"}, (name, job)
    for job, command in JOBS.items():
        assert services[job]["command"][:len(command)] == command
        assert services[job]["restart"] == "no"
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert services["topics"]["depends_on"] == {"kafka": {"condition": "service_healthy"}}


def test_gpu_agent_runs_only_behind_the_gpu_profile(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["gpu-agent"]["profiles"] == ["gpu"]
    assert [n for n, s in services.items() if s.get("profiles")] == ["gpu-agent"]


def test_services_that_call_the_kubernetes_api_get_a_kubeconfig(compose: dict[str, Any]) -> None:
    for name in ("cluster-watcher", "placement"):
        service = compose["services"][name]
        target = service["environment"]["GPUPLACE_KUBECONFIG"]
        assert [v["target"] for v in service["volumes"]] == [target]
        assert service["volumes"][0]["read_only"] is True


def test_kafka_is_one_kraft_node(compose: dict[str, Any]) -> None:
    kafka = compose["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    assert kafka["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    bootstrap = compose["services"]["placement"]["environment"]["GPUPLACE_KAFKA_BOOTSTRAP"]
    assert f"PLAINTEXT://{bootstrap}" in kafka["environment"]["KAFKA_ADVERTISED_LISTENERS"]


def test_the_plaintext_broker_is_named_and_reachable_from_the_compose_network_only(compose: dict[str, Any]) -> None:
    """Services default to SASL_SSL (issue 40): compose's plaintext broker must be asked for by name, and no port
    of it (or of anything) is published to the host, where anyone could write its topics."""
    for name, service in compose["services"].items():
        assert "ports" not in service, name
        if "GPUPLACE_KAFKA_BOOTSTRAP" in service.get("environment", {}):
            assert service["environment"]["GPUPLACE_KAFKA_SECURITY_PROTOCOL"] == "PLAINTEXT", name


def test_settings_come_as_gpuplace_variables_that_exist(compose: dict[str, Any]) -> None:
    """A misspelt GPUPLACE_* variable would be ignored silently (Settings ignores unknown names)."""
    fields = {f"GPUPLACE_{f.upper()}" for f in Settings.model_fields}
    for name, service in compose["services"].items():
        for variable in service.get("environment", {}):
            if variable.startswith("GPUPLACE_"):
                assert variable in fields, f"{name}: {variable} is no setting of libs/gpuplace/settings.py"


def test_the_database_password_is_only_in_the_secret_file(compose: dict[str, Any]) -> None:
    text = COMPOSE.read_text()
    assert not re.search(r"postgresql(\+asyncpg)?://[^:@\s]+:[^$@\s]+@", text), "a literal password in a URL"
    assert compose["secrets"]["db-password"] == {"file": "./.secrets/db-password"}
    postgres = compose["services"]["postgres"]
    assert postgres["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/db-password"
    assert "POSTGRES_PASSWORD" not in postgres["environment"]
    for name in [*SERVICES, *JOBS]:
        service = compose["services"][name]
        assert "db-password" in service["secrets"]
        assert "GPUPLACE_DATABASE_URL" not in service["environment"]
        assert "/run/secrets/db-password" in " ".join(service["entrypoint"])
    assert ".secrets/" in (ROOT / ".gitignore").read_text().split()
