"""The root `gpuplace` command: each sub-command lives in its own module and is mounted here."""

from __future__ import annotations

import importlib
import sys

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


# The commands a deployment runs, by the module that holds them: `gpuplace service NAME` loads only that module, so a
# service killed and restarted reads its partitions again in ~2 s rather than after importing the simulators and
# benchmarks too (half its start-up on a loaded node).
_SERVICE_COMMANDS = {"service": "gpuplace.cli.services", "up": "gpuplace.cli.services",
                     "migrate": "gpuplace.cli.services", "topics": "gpuplace.cli.services"}


def _register_all() -> None:
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(app)


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command in _SERVICE_COMMANDS:
        importlib.import_module(_SERVICE_COMMANDS[command]).register(app)
    else:
        _register_all()
    app()


if __name__ == "__main__":
    main()
