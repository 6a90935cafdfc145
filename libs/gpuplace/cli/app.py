"""The root `gpuplace` command: each sub-command lives in its own module and is mounted here."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)

# Sub-command modules each expose `register(app)`; a module that is missing is a packaging bug.
_COMMAND_MODULES = (
    "gpuplace.cli.sim",
    "gpuplace.cli.bench",
    "gpuplace.cli.services",
    "gpuplace.cli.demo",
    "gpuplace.cli.bench_pipeline",
    "gpuplace.cli.bench_placement",
    "gpuplace.cli.bench_chaos",
    "gpuplace.cli.latency",
    "gpuplace.cli.scenario",
)


def _register_all() -> None:
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(app)


def main() -> None:
    _register_all()
    app()


if __name__ == "__main__":
    main()
