"""The AsyncAPI document (`gpuplace docs`): an AsyncAPI 3 document with a channel and a message for every topic,
each message's payload the topic model's schema, every reference resolving; and docs/asyncapi.json, checked in
for subscribing teams, is that document (regenerate it with `gpuplace docs -o docs/asyncapi.json`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from gpuplace.cli.app import app
from gpuplace.cli.services import asyncapi_document, register
from gpuplace.contracts.events import TOPIC_MODELS

CHECKED_IN = Path(__file__).parents[3] / "docs" / "asyncapi.json"


def _resolve(document: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = document
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        assert isinstance(node, dict) and part in node, f"{ref} does not resolve (at {part!r})"
        node = node[part]
    return node


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [node["$ref"]] if isinstance(node.get("$ref"), str) else [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_the_document_is_asyncapi_3_with_a_channel_and_payload_schema_for_every_topic():
    doc = asyncapi_document()
    assert doc["asyncapi"].startswith("3.") and doc["info"]["title"] and doc["info"]["version"]
    assert "MUST IGNORE FIELDS" in doc["info"]["description"]
    assert doc["defaultContentType"] == "application/json"
    assert all(server["protocol"] == "kafka" for server in doc["servers"].values())
    by_address = {channel["address"]: channel for channel in doc["channels"].values()}
    assert by_address.keys() == TOPIC_MODELS.keys()
    for topic, model in TOPIC_MODELS.items():
        channel = by_address[topic]
        assert channel["description"].startswith(topic), channel["description"]
        (message_ref,) = [m["$ref"] for m in channel["messages"].values()]
        payload = _resolve(doc, _resolve(doc, message_ref)["payload"]["$ref"])
        fields = model.model_json_schema(by_alias=True)["properties"]
        assert payload["properties"].keys() == fields.keys(), topic
        assert set(payload["required"]) == set(model.model_json_schema(by_alias=True)["required"])
        assert "additionalProperties" not in payload  # readers must ignore fields added later
        assert {"schema", "event_id", "cluster", "occurred_at"} <= payload["properties"].keys()
    operations = doc["operations"].values()
    assert {_resolve(doc, op["channel"]["$ref"])["address"] for op in operations} == TOPIC_MODELS.keys()
    for ref in _refs(doc):
        _resolve(doc, ref)  # every reference points somewhere


def test_the_checked_in_document_is_the_generated_one(tmp_path):
    out = tmp_path / "asyncapi.json"
    register(app)
    result = CliRunner().invoke(app, ["docs", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text()) == asyncapi_document()
    assert CHECKED_IN.read_text() == out.read_text(), (
        "docs/asyncapi.json is out of date with the contracts: regenerate it with "
        "`gpuplace docs -o docs/asyncapi.json` and commit it")
