"""`gpuplace replay` on a file: the log the placement service recorded (tests/unit/usecases/test_replay.py), written
in `gpuplace export`'s format, replayed by the command with the recorded policy and as a what-if with a report."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpuplace.adapters.event_log import LogRecord, write_lines
from gpuplace.cli import app as cli
from tests.unit.usecases.test_replay import record


async def _log_file(tmp_path: Path) -> Path:
    entries = await record("gpuplace", pods=60)
    path = tmp_path / "east.jsonl"
    offsets: dict[str, int] = {}
    records = []
    for e in entries:
        offsets[e.topic] = offsets.get(e.topic, -1) + 1
        records.append(LogRecord(e.topic, 0, offsets[e.topic], e.timestamp_ms, None, 1, dict(e.event)))
    path.write_text("".join(write_lines(records)), encoding="utf-8")
    return path


def _invoke(*args: str) -> str:
    cli._register_all()
    result = CliRunner().invoke(cli.app, ["replay", *args], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


async def test_replay_of_a_file_reproduces_its_decisions(tmp_path):
    log = await _log_file(tmp_path)
    out = json.loads(_invoke("--cluster", "east", "--source", str(log), "--json"))
    assert out["replay"]["recorded_policy"] == "gpuplace"
    assert out["replay"]["compared"] > 50 and out["replay"]["differences"] == 0


async def test_what_if_prints_both_policies_and_writes_the_report(tmp_path):
    log = await _log_file(tmp_path)
    report = tmp_path / "what-if.md"
    text = _invoke("--cluster", "east", "--source", str(log), "--policy", "fgd", "--report", str(report))
    assert "recorded (gpuplace)" in text and "what-if (fgd)" in text
    body = report.read_text()
    assert "| recorded (gpuplace) |" in body and "| what-if (fgd) |" in body
    for plot in ("what-if-placed.png", "what-if-pending.png"):
        assert (tmp_path / plot).stat().st_size > 1000 and f"]({plot})" in body


async def test_replay_from_a_time_compares_only_later_decisions(tmp_path):
    log = await _log_file(tmp_path)
    whole = json.loads(_invoke("--cluster", "east", "--source", str(log), "--json"))
    later = json.loads(_invoke("--cluster", "east", "--source", str(log), "--json", "--from", "100000"))
    assert 0 < later["replay"]["compared"] < whole["replay"]["compared"]
    assert later["replay"]["differences"] == 0
