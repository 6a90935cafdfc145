"""`gpuplace latency`: fit the latency model on GPU colocation measurements and check its predictions.

    gpuplace latency fit --data DIR [--eval DIR] [--gpu NVIDIA-H200] [--save model.json] [--json]
    gpuplace latency cv  --data DIR [--gpu NVIDIA-H200] [--json]

`fit` fits on DIR/colocation_frames.csv and predicts every config and model of the eval directory
(DIR itself when absent) from its mix of streams; `cv` predicts each config from a fit on all the
others (leave-one-config-out) and prints the acceptance figures. A missing or malformed directory
is a usage error (exit 2) with a one-line message.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from gpuplace.core.latency import fit, frames
from gpuplace.core.latency.model import as_dict
from gpuplace.core.latency.speed import relative_speed
from gpuplace.sim import latency_evaluation
from gpuplace.traces import colocation

latency_app = typer.Typer(no_args_is_help=True, help="Fit and check the latency model (DESIGN.md §6).")


def register(app: typer.Typer) -> None:
    app.add_typer(latency_app, name="latency")


def rows(predictions: list[latency_evaluation.ConfigPrediction]) -> list[dict]:
    """The --json objects, one per config and model."""
    return [{"config": p.config, "model": p.workload_class, "fps": p.frame_rate_hz,
             "observed_p95_ms": round(p.observed_p95_ms, 3), "predicted_p95_ms": _ms(p.predicted_p95_ms),
             "predicted_overload": p.predicted_overload} for p in predictions]


@latency_app.command("fit", help="Fit the model on DIR's measurements and predict every config of --eval (or DIR).")
def fit_command(
    data: Path = typer.Option(..., help="Directory with colocation_frames.csv to fit on."),
    eval_dir: Path | None = typer.Option(None, "--eval", help="Directory to predict (default: --data)."),
    gpu: str = typer.Option(colocation.DEFAULT_GPU, help="GPU product the --data frames were measured on."),
    eval_gpu: str | None = typer.Option(None, help="GPU product of --eval (default: --gpu)."),
    save: Path | None = typer.Option(None, help="Write the fitted model state (JSON) to this file."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON array, one object per config and model."),
) -> None:
    table, target = _read(data), _read(eval_dir) if eval_dir is not None else None
    model = fit.fit(table, gpu_speed=relative_speed(gpu))
    stats = frames.summarise(target if target is not None else table)
    predictions = latency_evaluation.predict_stats(model, stats, gpu_speed=relative_speed(eval_gpu or gpu))
    if save is not None:
        save.write_text(json.dumps(as_dict(model), indent=2) + "\n")
    if as_json:
        typer.echo(json.dumps(rows(predictions), indent=2))
    else:
        _print(predictions, f"fitted on {data}, predicting {eval_dir or data}")


@latency_app.command("cv", help="Leave-one-config-out: predict each config from a fit on the others; print "
                                 "the acceptance figures.")
def cv_command(
    data: Path = typer.Option(..., help="Directory with colocation_frames.csv."),
    gpu: str = typer.Option(colocation.DEFAULT_GPU, help="GPU product the frames were measured on."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: rows and acceptance figures."),
) -> None:
    predictions = latency_evaluation.leave_one_config_out(_read(data), gpu_speed=relative_speed(gpu))
    accuracy = latency_evaluation.accuracy(predictions)
    if as_json:
        summary = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(accuracy).items()}
        summary["every_overload_flagged"] = accuracy.every_overload_flagged
        typer.echo(json.dumps({"rows": rows(predictions), **summary}, indent=2))
        return
    _print(predictions, f"leave-one-config-out on {data}")
    Console().print(
        f"median |error| of p95 {accuracy.median_abs_error_pct:.1f}% over {accuracy.bounded} bounded config rows "
        f"({accuracy.under_predicted} below observed); overloaded: {', '.join(accuracy.overloaded) or 'none'}; "
        f"flagged: {', '.join(accuracy.flagged) or 'none'}")


def _read(directory: Path) -> frames.FrameTable:
    try:
        return colocation.read_frames(directory)
    except colocation.ColocationDataError as error:
        raise typer.BadParameter(str(error)) from None


def _ms(value: float) -> float | None:
    return round(value, 3) if value != float("inf") else None


def _print(predictions: list[latency_evaluation.ConfigPrediction], title: str) -> None:
    table = Table(title=title)
    for column in ("config", "model", "fps", "load", "observed p95 ms", "predicted p95 ms", "error %", "overload"):
        table.add_column(column, justify="left" if column in ("config", "model") else "right")
    for p in predictions:
        overloaded = p.predicted_overload
        table.add_row(p.config, p.workload_class, f"{p.frame_rate_hz:g}", f"{p.load_fraction:.2f}",
                      f"{p.observed_p95_ms:.2f}", "unbounded" if overloaded else f"{p.predicted_p95_ms:.2f}",
                      "" if overloaded else f"{p.error_pct:+.1f}", "yes" if overloaded else "")
    Console().print(table)


__all__ = ["register", "rows"]
