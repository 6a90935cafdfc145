"""The schema evolution rule (contracts/__init__.py): a v1 reader keeps reading when a field is added, and a change
that is not additive fails here until it goes to a new topic version.

Each topic's JSON Schema is checked in under tests/data/schemas/<topic>.json. Comparing the models with it:
  * unchanged (descriptions, titles and defaults aside): passes;
  * additive (new optional fields, new $defs): fails, asking for the snapshot to be updated, so every growth of
    the public schema is a reviewed diff;
  * anything else: fails, naming the change and telling the developer to add a new topic version.
Update the snapshots after an additive change with:
    GPUPLACE_UPDATE_SCHEMAS=1 pytest tests/unit/contracts/test_schema_evolution.py
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from gpuplace.contracts import read_event
from gpuplace.contracts.events import (
    TOPIC_MODELS,
    DeadLetter,
    DrainableNode,
    GpuAssignment,
    GpuTelemetry,
    LatencyWindow,
    NodeAddition,
    NodeShape,
    PlacementEvent,
    ScaleHintEvent,
)
from tests.builders import node_event, pod_event

SNAPSHOTS = Path(__file__).parents[2] / "data" / "schemas"
UPDATE = "GPUPLACE_UPDATE_SCHEMAS=1 pytest tests/unit/contracts/test_schema_evolution.py"
_COSMETIC = {"description", "title", "default", "examples"}


def schema_of(topic: str) -> dict[str, Any]:
    return TOPIC_MODELS[topic].model_json_schema(by_alias=True, mode="validation")


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k not in _COSMETIC}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def changes(old: dict[str, Any], new: dict[str, Any], where: str = "") -> tuple[list[str], list[str]]:
    """(breaking, additive) differences of `new` from `old`, each a phrase naming the field (module docstring)."""
    breaking: list[str] = []
    additive: list[str] = []
    old_props, new_props = old.get("properties", {}), new.get("properties", {})
    for name, old_prop in old_props.items():
        if name not in new_props:
            breaking.append(f"field {where}{name} was removed or renamed")
        elif _strip(old_prop) != _strip(new_prop := new_props[name]):
            breaking.append(f"field {where}{name} changed from {json.dumps(_strip(old_prop))} to "
                            f"{json.dumps(_strip(new_prop))}")
    for name in new_props.keys() - old_props.keys():
        if name in new.get("required", []):
            breaking.append(f"new field {where}{name} is required (old events lack it)")
        else:
            additive.append(f"new optional field {where}{name}")
    old_required, new_required = set(old.get("required", [])), set(new.get("required", [])) & old_props.keys()
    for name in sorted(old_required - new_required):
        if name in new_props:
            breaking.append(f"field {where}{name} is no longer required (v1 readers require it)")
    for name in sorted(new_required - old_required):
        breaking.append(f"field {where}{name} became required (old events may lack it)")
    rest = {"properties", "required", "$defs"}
    old_rest, new_rest = ({k: v for k, v in schema.items() if k not in rest} for schema in (old, new))
    if _strip(old_rest) != _strip(new_rest):
        breaking.append(f"the shape of {where.rstrip('.') or 'the event'} itself changed (type, additionalProperties "
                        "or a constraint)")
    old_defs, new_defs = old.get("$defs", {}), new.get("$defs", {})
    for name, old_def in old_defs.items():
        if name not in new_defs:
            breaking.append(f"nested type {name} was removed or renamed")
        else:
            more_breaking, more_additive = changes(old_def, new_defs[name], f"{name}.")
            breaking += more_breaking
            additive += more_additive
    additive += [f"new nested type {name}" for name in sorted(new_defs.keys() - old_defs.keys())]
    return breaking, additive


@pytest.mark.parametrize("topic", sorted(TOPIC_MODELS))
def test_every_topics_schema_changed_only_additively(topic: str) -> None:
    path, current = SNAPSHOTS / f"{topic}.json", schema_of(topic)
    if os.environ.get("GPUPLACE_UPDATE_SCHEMAS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    if not path.exists():
        pytest.fail(f"{topic} has no schema snapshot: a new topic? Record it with `{UPDATE}` and commit {path}")
    breaking, additive = changes(json.loads(path.read_text()), current)
    if breaking:
        base, _, version = topic.rpartition(".v")
        pytest.fail(
            f"{topic}: a breaking change for its consumers: {'; '.join(breaking)}.\n"
            f"Old events must stay readable and v1 subscribers must keep working: keep {topic} as it was and put "
            f"the new shape on a new topic version ({base}.v{int(version) + 1}: contracts/topics.py, a model in "
            "TOPIC_MODELS), published alongside the old one until its consumers have moved (contracts/__init__.py). "
            "If the change is meant to be additive, give the new field a default instead.")
    if additive:
        pytest.fail(f"{topic} grew compatibly ({'; '.join(additive)}): record the new schema with `{UPDATE}` "
                    f"and commit {path.relative_to(SNAPSHOTS.parents[2])}")


def test_no_snapshot_belongs_to_a_topic_that_is_gone() -> None:
    gone = sorted({p.stem for p in SNAPSHOTS.glob("*.json")} - TOPIC_MODELS.keys())
    assert not gone, (f"topics {gone} have schema snapshots but no model: old topics stay readable (replay reads "
                      "them); keep their model in TOPIC_MODELS")


class PlacementEventWithMore(PlacementEvent):
    """What a newer producer might publish: an added optional field, at the top and in a nested type."""

    preemptible: bool = False


def test_the_checker_sees_an_added_optional_field_as_additive_and_the_rest_as_breaking() -> None:
    v1 = PlacementEvent.model_json_schema(by_alias=True)
    assert changes(v1, PlacementEventWithMore.model_json_schema(by_alias=True)) == (
        [], ["new optional field preemptible"])
    renamed = json.loads(json.dumps(v1))
    renamed["properties"]["node_name"] = renamed["properties"].pop("node")
    retyped = json.loads(json.dumps(v1))
    retyped["$defs"]["GpuAssignment"]["properties"]["memory_mib"] = {"type": "string"}
    required = json.loads(json.dumps(v1))
    required["properties"]["preemptible"] = {"type": "boolean"}
    required["required"].append("preemptible")
    narrowed = json.loads(json.dumps(v1))
    narrowed["properties"]["kind"]["enum"].append("preempted")  # a new kind: an old reader's Literal refuses it
    described = json.loads(json.dumps(v1))
    described["properties"]["policy"]["description"] = "the policy that decided"
    assert changes(v1, renamed)[0] == ["field node was removed or renamed"]
    assert changes(v1, retyped)[0][0].startswith("field GpuAssignment.memory_mib changed")
    assert changes(v1, required)[0] == ["new field preemptible is required (old events lack it)"]
    assert changes(v1, narrowed)[0][0].startswith("field kind changed")
    assert changes(v1, described) == ([], [])


def _sample(topic: str) -> dict[str, Any]:
    events = {
        "gpuplace.pods.v1": pod_event("slam-0"),
        "gpuplace.nodes.v1": node_event("n1"),
        "gpuplace.telemetry.v1": GpuTelemetry(cluster="east", node="n1", gpu_index=0, memory_total_mib=16384,
                                              memory_used_mib=10),
        "gpuplace.latency.v1": LatencyWindow(cluster="east", namespace="robots", pod="slam-0", workload="slam",
                                             window_s=10, frames=300, p50_ms=9, p95_ms=11, p99_ms=12),
        "gpuplace.placements.v1": PlacementEvent(
            cluster="east", kind="decided", namespace="robots", pod="slam-0", node="n1", policy="gpuplace",
            gpus=(GpuAssignment(index=0, memory_mib=9420, share_milli=500),)),
        "gpuplace.deadletter.v1": DeadLetter.of(cluster="east", source_topic="gpuplace.pods.v1", consumer="placement",
                                                reason="bad", value=b"{"),
        "gpuplace.hints.v1": ScaleHintEvent(
            cluster="east", waiting=3, blocked_by={"capacity": 2, "fragmentation": 1},
            additions=(NodeAddition(shape=NodeShape(name="8xH100:96c:768Gi", gpu_model="H100", gpu_count=8,
                                                    gpu_memory_mib=81559, cpu_milli=96000, memory_mib=786432),
                                    nodes=1, pods=3, blocked_by="capacity"),),
            drainable=(DrainableNode(node="n2", moves=2),), reason="1 x 8xH100 places all 3"),
    }
    return json.loads(events[topic].model_dump_json(by_alias=True))


@pytest.mark.parametrize("topic", sorted(TOPIC_MODELS))
def test_a_v1_reader_reads_an_event_with_added_fields(topic: str) -> None:
    model, wire = TOPIC_MODELS[topic], _sample(topic)
    grown = {**copy.deepcopy(wire), "added_in_a_later_release": {"any": ["shape"]}}
    if grown.get("gpu"):  # a field added inside a nested type, too
        grown["gpu"]["added_nested"] = 1
    if grown.get("gpus"):
        grown["gpus"] = [{**gpu, "added_nested": 1} for gpu in grown["gpus"]]
    event = read_event(model, json.dumps(grown))
    assert event == model.model_validate(wire)  # the same event, the unknown fields left out
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        model.model_validate(grown)  # building an event stays strict: a typo in gpuplace's code fails at once


def test_a_newer_producers_placement_is_read_by_the_v1_model() -> None:
    newer = PlacementEventWithMore(cluster="east", kind="bound", namespace="robots", pod="slam-0", node="n1",
                                   preemptible=True)
    event = read_event(PlacementEvent, newer.model_dump_json(by_alias=True))
    assert (event.event_id, event.kind, event.node) == (newer.event_id, "bound", "n1")
    with pytest.raises(ValueError, match="schema version 2 is not one this reader understands"):
        read_event(PlacementEvent, newer.model_dump_json(by_alias=True).replace('"schema":1', '"schema":2'))
