"""`gpuplace latency fit|cv` and `gpuplace scenario`: JSON shapes and one-line usage errors (that the packages
list their modules: tests/unit/core/test_public_names.py)."""

import json
import re

import pytest
import typer
from typer.testing import CliRunner

from gpuplace.cli import latency, scenario
from gpuplace.traces import colocation

FRAMES = "config,streams,worker,model,fps,frame,latency_ms,service_ms\n" + "".join(
    f"{c},{n},{w},m,30,{f},{base + n * 2 + (f % 5) * 0.1},{base}\n"
    for c, n, base in (("solo", 1, 5.0), ("x4", 4, 5.0), ("x8", 8, 5.0), ("x12", 12, 5.0))
    for w in range(n) for f in range(40))


@pytest.fixture
def app():
    root = typer.Typer()
    latency.register(root)
    scenario.register(root)
    return root


@pytest.fixture
def data(tmp_path):
    (tmp_path / colocation.FRAMES_FILE).write_text(FRAMES)
    return tmp_path


def test_fit_prints_one_object_per_config_and_model(app, data):
    result = CliRunner().invoke(app, ["latency", "fit", "--data", str(data), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [r["config"] for r in rows] == ["solo", "x4", "x8", "x12"]
    assert set(rows[0]) == {"config", "model", "fps", "observed_p95_ms", "predicted_p95_ms", "predicted_overload"}
    assert all(r["predicted_overload"] is False for r in rows)


def test_fit_saves_the_state_and_predicts_another_directory(app, data, tmp_path_factory):
    other = tmp_path_factory.mktemp("eval")
    (other / colocation.FRAMES_FILE).write_text(FRAMES.replace("x12", "y12"))
    state = other / "model.json"
    result = CliRunner().invoke(app, ["latency", "fit", "--data", str(data), "--eval", str(other),
                                      "--save", str(state), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)[-1]["config"] == "y12"
    assert "m" in json.loads(state.read_text())["classes"]


def test_cv_reports_the_acceptance_figures(app, data):
    result = CliRunner().invoke(app, ["latency", "cv", "--data", str(data), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert len(out["rows"]) == 4 and out["every_overload_flagged"] is True and "median_abs_error_pct" in out


@pytest.mark.parametrize("args", [["--data", "/no/such/dir"], ["--data", "{empty}"], ["--data", "{data}", "--eval",
                                                                                       "/no/such/dir"]])
def test_missing_or_invalid_directories_are_usage_errors(app, data, tmp_path_factory, args):
    empty = tmp_path_factory.mktemp("empty")
    args = [a.format(empty=empty, data=data) for a in args]
    result = CliRunner().invoke(app, ["latency", "fit", *args])
    assert result.exit_code == 2
    message = re.sub(r"[\s│]+", "", result.output)  # rich wraps long paths inside its box
    assert "notadirectory" in message or "nosuchfile" in message


def test_a_malformed_frames_file_is_a_usage_error(app, tmp_path):
    (tmp_path / colocation.FRAMES_FILE).write_text("config,model\nx,y\n")
    result = CliRunner().invoke(app, ["latency", "fit", "--data", str(tmp_path)])
    assert result.exit_code == 2 and "missing column" in result.output


def test_scenario_prints_the_kpis_per_policy(app):
    result = CliRunner().invoke(app, ["scenario", "robotics", "--policy", "exclusive,gpuplace", "--seeds", "3",
                                      "--nodes", "2", "--pods", "60", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert [s["policy"] for s in out] == ["exclusive", "gpuplace"]
    assert {"slo_attainment", "deadline_miss_frames_pct", "pods_per_gpu"} <= set(out[0])


def test_scenario_refuses_unknown_names(app):
    result = CliRunner().invoke(app, ["scenario", "robotics", "--policy", "nope", "--nodes", "1", "--pods", "5"])
    assert result.exit_code == 2 and "unknown policy" in result.output
    assert CliRunner().invoke(app, ["scenario", "mars"]).exit_code == 2


def test_fit_and_cv_take_several_data_directories(app, data, tmp_path_factory):
    other = tmp_path_factory.mktemp("session2")
    header, *lines = FRAMES.splitlines(keepends=True)
    (other / colocation.FRAMES_FILE).write_text(header + "".join(
        line.replace("x12,12", "y16,16") for line in lines if line.startswith("x12,")))
    result = CliRunner().invoke(app, ["latency", "cv", "--data", str(data), "--data", str(other), "--json"])
    assert result.exit_code == 0, result.output
    assert [r["config"] for r in json.loads(result.output)["rows"]] == ["solo", "x4", "x8", "x12", "y16"]


def test_one_config_in_two_directories_is_a_usage_error(app, data):
    result = CliRunner().invoke(app, ["latency", "fit", "--data", str(data), "--data", str(data)])
    assert result.exit_code == 2 and "more than one table" in re.sub(r"[\s│]+", " ", result.output)


def test_cv_holds_out_a_model_known_only_alone(app, tmp_path):
    frames = FRAMES + "".join(f"solo_n,1,0,n,30,{f},{4.0 + (f % 5) * 0.1},4.0\n" for f in range(40)) + "".join(
        f"mix,4,{w},{'m' if w < 2 else 'n'},30,{f},{12.0 + (f % 5) * 0.1},5.0\n" for w in range(4) for f in range(40))
    (tmp_path / colocation.FRAMES_FILE).write_text(frames)
    result = CliRunner().invoke(app, ["latency", "cv", "--data", str(tmp_path), "--hold-out-model", "n", "--json"])
    assert result.exit_code == 0, result.output
    assert {r["config"] for r in json.loads(result.output)["rows"]} == {"mix"}
    unknown = CliRunner().invoke(app, ["latency", "cv", "--data", str(tmp_path), "--hold-out-model", "zz"])
    assert unknown.exit_code == 2 and "no config runs class" in unknown.output
