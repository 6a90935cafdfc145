"""The chart's values.yaml is its documentation: every value has a comment right above it, and every value is
read by a template (a value nothing reads would let an operator believe a setting took effect).

Rendering and the apiserver's verdict on the chart are in tests/integration/test_helm_chart.py (they need helm and
the local stack)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
