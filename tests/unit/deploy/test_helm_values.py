"""The chart's values.yaml is its documentation: every value has a comment right above it, and every value is
read by a template (a value nothing reads would let an operator believe a setting took effect). values.schema.json
holds every value and only those, so helm refuses a misspelt key or a value of the wrong kind at install.

Rendering and the apiserver's verdict on the chart are in tests/integration/test_helm_chart.py (they need helm and
the local stack)."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

CHART = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "gpuplace"
KEY = re.compile(r"^(\s*)(- )?([A-Za-z_][\w.-]*):")
# Kubernetes' own structures, passed through as they are (toYaml): their fields are Kubernetes', not the chart's.
PASSED_THROUGH = {"resources", "nodeSelector", "tolerations", "affinity", "labels", "annotations", "extra",
                  "podAnnotations", "podLabels", "imagePullSecrets"}


def uncommented_keys(text: str) -> list[str]:
    """Lines setting a value without a comment line right above; a section (a key whose children follow, such as
    `kafka:`) needs none, its values do."""
    missing, previous, parents = [], "", []  # parents: (indent, key)
    for number, line in enumerate(text.splitlines(), 1):
        match = KEY.match(line)
        if match:
            indent = len(match.group(1)) + (2 if match.group(2) else 0)
            parents = [(i, k) for i, k in parents if i < indent]
            inside_passthrough = any(k in PASSED_THROUGH for _, k in parents)
            section = not line[match.end():].strip() and match.group(3) not in PASSED_THROUGH
            if not inside_passthrough and not section and not previous.lstrip().startswith("#"):
                missing.append(f"{number}: {line.strip()}")
            parents.append((indent, match.group(3)))
        if line.strip():
            previous = line
    return missing


def value_paths(values: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        path = f"{prefix}.{key}"
        yield path
        if isinstance(value, dict) and key not in PASSED_THROUGH:
            yield from value_paths(value, path)


def test_every_value_has_a_comment() -> None:
    assert uncommented_keys((CHART / "values.yaml").read_text()) == []


def test_the_comment_check_finds_an_uncommented_value() -> None:
    text = "# a\na: 1\nb:\n  # c\n  c: 2\n  d: 3\n  resources:\n    requests: {}\n  # e\n  e: []\n"
    assert uncommented_keys(text) == ["6: d: 3", "7: resources:"]


def test_every_value_is_read_by_a_template() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    templates = " ".join(p.read_text() for p in (CHART / "templates").iterdir())
    # clusters[] fields are read through `range .Values.clusters` as .name, .region, ...
    cluster_fields = {key for cluster in values["clusters"] for key in cluster}
    unread = [path for path in value_paths(values) if f".Values{path}" not in templates]
    assert unread == []
    assert all(f".{field}" in templates for field in cluster_fields)


def _schema() -> dict[str, Any]:
    return json.loads((CHART / "values.schema.json").read_text())


def _defaults() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def _merged(defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """What helm validates: the user's values over the chart's (maps merged, lists and scalars replaced)."""
    merged = copy.deepcopy(defaults)
    for key, value in given.items():
        both = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = _merged(merged[key], value) if both else value
    return merged


def _errors(values: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(_schema())
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(values)]


def test_the_schema_accepts_the_defaults_and_a_full_install() -> None:
    jsonschema.Draft7Validator.check_schema(_schema())
    assert _errors(_defaults()) == []
    full = {"clusters": [{"name": "east", "region": "us-east"},
                         {"name": "west", "region": "us-west", "kubeconfigSecret": "west-kubeconfig",
                          "nodeLabelSelector": "nvidia.com/gpu.present=true", "leaseNamespace": "gpuplace-system"}],
            "kafka": {"securityProtocol": "SASL_SSL", "sasl": {"username": "gpuplace", "existingSecret": "kafka"},
                      "topics": {"replicationFactor": 3}},
            "settings": {"extra": {"telemetry_interval_s": 10, "dra_enabled": False}},
            "imagePullSecrets": [{"name": "regcred"}], "placement": {"resources": {"limits": {"cpu": "2"}}}}
    assert _errors(_merged(_defaults(), full)) == []


@pytest.mark.parametrize("given, error", [
    ({"placement": {"replica": 3}}, "placement: Additional properties are not allowed ('replica' was unexpected)"),
    ({"kafka": {"topics": {"replicationFactr": 1}}}, "'replicationFactr' was unexpected"),
    ({"clusters": [{"name": "east", "regoin": "us-east"}]}, "clusters.0: Additional properties are not allowed"),
    ({"settngs": {"policy": "fgd"}}, "'settngs' was unexpected"),
    ({"kafka": {"securityProtocol": "SASL"}}, "kafka.securityProtocol: 'SASL' is not one of"),
    ({"settings": {"logLevel": "verbose"}}, "settings.logLevel: 'verbose' is not one of"),
    ({"clusters": [{"name": "East_1"}]}, "clusters.0.name: 'East_1' does not match"),
    ({"placement": {"replicas": "2"}}, "placement.replicas: '2' is not of type 'integer'"),
])
def test_the_schema_rejects_a_misspelt_key_or_a_wrong_value(given: dict[str, Any], error: str) -> None:
    errors = _errors(_merged(_defaults(), given))
    assert len(errors) == 1 and error in errors[0], errors


def test_the_schema_lists_no_value_values_yaml_lacks() -> None:
    """The other way round from additionalProperties: a key the schema allows but values.yaml does not hold would
    be a setting no template reads (test_every_value_is_read_by_a_template reads values.yaml's)."""
    def schema_paths(node: dict[str, Any], prefix: str = "") -> Iterator[str]:
        for key, sub in node.get("properties", {}).items():
            yield f"{prefix}.{key}"
            if key not in PASSED_THROUGH:
                yield from schema_paths(sub, f"{prefix}.{key}")

    cluster_item = _schema()["properties"]["clusters"]["items"]
    listed = {p for p in schema_paths(_schema()) if not p.startswith(".clusters.")}
    assert listed == set(value_paths(_defaults()))
    assert set(cluster_item["properties"]) == {key for cluster in _defaults()["clusters"] for key in cluster}
