"""`gpuplace latency`: fit the latency model on GPU colocation measurements and check its predictions.

    gpuplace latency fit --data DIR [--data DIR ...] [--eval DIR] [--gpu NVIDIA-H200] [--save model.json] [--json]
    gpuplace latency cv  --data DIR [--data DIR ...] [--gpu NVIDIA-H200] [--hold-out-model r50] [--json]

`fit` fits on the frames of every --data directory (colocation_frames.csv, and colocation_nvml.csv's GPU
utilisation where present; sessions measured on the same GPU product) and predicts every config and model of
the eval directory (the --data directories when absent) from its mix of streams; `cv` predicts each config
from a fit on all the others (leave-one-config-out) and prints the acceptance figures, or, with
--hold-out-model, every co-location of that model from a fit that knows it only from its solo configs.
A missing or malformed directory, or one config name in two directories, is a usage error (exit 2) with a
one-line message.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from gpuplace.cli.console import new_console
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
    data: list[Path] = typer.Option(..., help="Directory with colocation_frames.csv to fit on (repeatable)."),
    eval_dir: Path | None = typer.Option(None, "--eval", help="Directory to predict (default: --data)."),
    gpu: str = typer.Option(colocation.DEFAULT_GPU, help="GPU product the --data frames were measured on."),
    eval_gpu: str | None = typer.Option(None, help="GPU product of --eval (default: --gpu)."),
    save: Path | None = typer.Option(None, help="Write the fitted model state (JSON) to this file."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON array, one object per config and model."),
) -> None:
    table, target = _read(data), _read(eval_dir) if eval_dir is not None else None
    model = fit.fit(table, gpu_speed=relative_speed(gpu), utilisation=_utilisation(data))
    stats = frames.summarise(target if target is not None else table)
    predictions = latency_evaluation.predict_stats(model, stats, gpu_speed=relative_speed(eval_gpu or gpu))
    if save is not None:
        save.write_text(json.dumps(as_dict(model), indent=2) + "\n")
    if as_json:
        typer.echo(json.dumps(rows(predictions), indent=2))
    else:
        fitted_on = ", ".join(map(str, data))
        _print(predictions, f"fitted on {fitted_on}, predicting {eval_dir or fitted_on}")


@latency_app.command("cv", help="Leave-one-config-out: predict each config from a fit on the others; print "
                                 "the acceptance figures.")
def cv_command(
    data: list[Path] = typer.Option(..., help="Directory with colocation_frames.csv (repeatable)."),
    gpu: str = typer.Option(colocation.DEFAULT_GPU, help="GPU product the frames were measured on."),
    hold_out_model: str | None = typer.Option(
        None, help="Instead: fit with this model known only from its solo configs and predict its co-locations."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: rows and acceptance figures."),
) -> None:
    table, utilisation = _read(data), _utilisation(data)
    if hold_out_model is None:
        predictions = latency_evaluation.leave_one_config_out(table, gpu_speed=relative_speed(gpu),
                                                              utilisation=utilisation)
        title = f"leave-one-config-out on {', '.join(map(str, data))}"
    else:
        try:
            predictions = latency_evaluation.leave_one_model_out(table, hold_out_model, gpu_speed=relative_speed(gpu),
                                                                 utilisation=utilisation)
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--hold-out-model") from None
        title = f"{hold_out_model} known only alone, its co-locations predicted; {', '.join(map(str, data))}"
    accuracy = latency_evaluation.accuracy(predictions)
    if as_json:
        summary = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(accuracy).items()}
        summary["every_overload_flagged"] = accuracy.every_overload_flagged
        typer.echo(json.dumps({"rows": rows(predictions), **summary}, indent=2))
        return
    _print(predictions, title)
    new_console().print(
        f"median |error| of p95 {accuracy.median_abs_error_pct:.1f}% over {accuracy.bounded} bounded config rows "
        f"({accuracy.under_predicted} below observed); overloaded: {', '.join(accuracy.overloaded) or 'none'}; "
        f"flagged: {', '.join(accuracy.flagged) or 'none'}\n"
        f"rows under half their periods met, not flagged: {accuracy.missed_overloads}; rows that met them all, "
        f"flagged: {accuracy.flagged_in_time}; |p95 error| of the other rows: median "
        f"{accuracy.others_median_abs_error_pct:.1f}%, 95th percentile {accuracy.others_p95_abs_error_pct:.1f}%, max "
        f"{accuracy.others_max_abs_error_pct:.1f}%")


def _read(directories: Path | list[Path]) -> frames.FrameTable:
    try:
        if isinstance(directories, Path):
            return colocation.read_frames(directories)
        return colocation.read_sessions(directories)
    except colocation.ColocationDataError as error:
        raise typer.BadParameter(str(error)) from None


def _utilisation(directories: list[Path]) -> dict[str, float]:
    try:
        return colocation.read_utilisation(directories)
    except colocation.ColocationDataError as error:
        raise typer.BadParameter(str(error)) from None


def _ms(value: float) -> float | None:
    return round(value, 3) if value != float("inf") else None


def _print(predictions: list[latency_evaluation.ConfigPrediction], title: str) -> None:
    table = Table(title=title)
    for column in ("config", "model", "fps", "load", "met %", "observed p95 ms", "predicted p95 ms", "error %",
                   "overload"):
        table.add_column(column, justify="left" if column in ("config", "model") else "right", overflow="fold")
    for p in predictions:
        overloaded = p.predicted_overload
        bounded = p.predicted_p95_ms != float("inf")  # an overloaded row: its backlog over the frames observed
        table.add_row(p.config, p.workload_class, f"{p.frame_rate_hz:g}", f"{p.load_fraction:.2f}",
                      f"{100 * p.within_period:.1f}",
                      f"{p.observed_p95_ms:.2f}", f"{p.predicted_p95_ms:.2f}" if bounded else "unbounded",
                      f"{p.error_pct:+.1f}" if bounded else "", "yes" if overloaded else "")
    new_console(min_width=130).print(table)


__all__ = ["register", "rows"]
