"""gpuplace places GPU pods on Kubernetes fleets so that GPU memory stays usable (few stranded holes) and every
pod's predicted p95 latency stays inside its deadline; it binds through the Kubernetes API and moves pods out of
the way when fragmentation blocks one. Services: `gpuplace service NAME`; try it: `gpuplace demo`."""

from __future__ import annotations

import importlib.metadata
import sys

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__, pretty_exceptions_enable=False)
_DEBUG = {"on": False}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpuplace {importlib.metadata.version('gpuplace')}")
        raise typer.Exit


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print gpuplace's version and exit."),
    debug: bool = typer.Option(False, "--debug", help="Show the full traceback of an error instead of one line."),
) -> None:
    _DEBUG["on"] = debug


# The commands a deployment runs live in one module: `gpuplace service NAME` imports only that one, so a service
# killed and restarted reads its partitions again in ~2 s rather than after importing the simulators and benchmarks
# too (half its start-up on a loaded node).
_SERVICE_COMMANDS = frozenset({"service", "up", "migrate", "topics"})


def _register_services() -> None:
    from gpuplace.cli import services  # imported here, not at the top: see _register_all

    services.register(app)


def _register_all() -> None:
    """Every sub-command module's `register(app)`, in the order `gpuplace --help` lists them.

    Plain imports, so import-linter sees the CLI's dependencies, but inside this function: `gpuplace --version`
    answers without them, and they bring SQLAlchemy, aiokafka, kubernetes_asyncio and NumPy with them."""
    from gpuplace.cli import (
        bench,
        bench_chaos,
        bench_dra,
        bench_explain,
        bench_parity,
        bench_pipeline,
        bench_placement,
        bench_robustness,
        demo,
        event_log,
        explain,
        latency,
        replay,
        report,
        scenario,
        services,
        sim,
    )

    for module in (sim, replay, bench, services, demo, bench_pipeline, bench_dra, bench_placement, bench_explain,
                   bench_robustness, bench_chaos, bench_parity, latency, scenario, explain, event_log, report):
        module.register(app)


def _version_only(args: list[str]) -> bool:
    """`gpuplace --version` (before any command): answered before the commands' modules are imported, which
    bring SQLAlchemy, aiokafka, kubernetes_asyncio and NumPy with them (about 1.5 s of a 2 s answer)."""
    return args[:1] == ["--version"] or args[:2] == ["--debug", "--version"]


def main() -> None:
    if _version_only(sys.argv[1:]):
        print(f"gpuplace {importlib.metadata.version('gpuplace')}")
        return
    command = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), "")
    if command in _SERVICE_COMMANDS:
        _register_services()
    else:
        _register_all()
    try:
        app()
    except SystemExit as exc:  # a service's SystemExit("... needs KUBECONFIG"): the same one-line shape
        if isinstance(exc.code, str):
            print(f"gpuplace: error: {exc.code}", file=sys.stderr)
            sys.exit(1)
        raise
    except Exception as exc:
        if _DEBUG["on"]:
            raise
        from gpuplace.cli.errors import one_line  # imported on failure only: it brings every adapter's errors

        print(f"gpuplace: error: {one_line(exc)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
