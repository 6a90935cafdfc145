"""What the commands that run the whole pipeline on the local stack share: `gpuplace demo`, `bench pipeline`
and `bench chaos` take the same options, find the stack the same way and show the same progress bars.

Options are `Annotated` types, so each command keeps its own default (`nodes: Nodes = 24`) and the help text
is written once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gpuplace.harness import stack_env
from gpuplace.settings import Settings

Nodes = Annotated[int, typer.Option(min=1, help="fake GPU nodes (8 GPUs each), split over the clusters")]
PolicyName = Annotated[str | None, typer.Option(help="placement policy (default: GPUPLACE_POLICY, else gpuplace)")]
Keep = Annotated[bool, typer.Option(help="leave the fleet and the pods in the clusters")]

ProgressFn = Callable[[str, int, int], None]
"""progress(stage, done, total): what PipelineRun and ChaosRun report as they go."""


# Settings argument <- the variables that set it; the stack's env file fills an argument none of them sets.
_FROM_STACK = {"database_url": ("GPUPLACE_DATABASE_URL",), "KUBECONFIG": ("GPUPLACE_KUBECONFIG", "KUBECONFIG")}
# Kafka's settings go together: the stack's broker with the stack's admin user, or none of them (a bootstrap list
# set in the environment is another broker, which the stack's password would not open).
_KAFKA_FROM_STACK = {f"kafka_{name}": f"GPUPLACE_KAFKA_{name.upper()}" for name in (
    "bootstrap", "security_protocol", "sasl_mechanism", "username", "password", "ca_file")}


def stack_fallbacks() -> dict[str, Any]:
    """Settings arguments from the stack's env file for what the environment does not set."""
    stack = stack_env.stack_env()
    fallback: dict[str, Any] = {arg: stack[keys[-1]] for arg, keys in _FROM_STACK.items()
                                if stack.get(keys[-1]) and not any(os.environ.get(k) for k in keys)}
    if not os.environ.get("GPUPLACE_KAFKA_BOOTSTRAP"):
        fallback.update({arg: stack[name] for arg, name in _KAFKA_FROM_STACK.items() if stack.get(name)})
    return fallback


def settings_from_stack() -> Settings:
    """Settings where unset variables fall back to what the local stack wrote in its env file.

    The fallbacks go to Settings as arguments, not into os.environ: a process that runs one command in-process
    and then another (the tests) must not find the stack's KUBECONFIG in its environment afterwards."""
    return Settings(**stack_fallbacks())


def local_stack(hint: str = "run `deploy/local/stack.sh up` first") -> tuple[Settings, dict[str, str]]:
    """The settings and every cluster's kubeconfig of the local stack; a usage error (with `hint`) if none is up."""
    settings = settings_from_stack()
    kubeconfigs = stack_env.cluster_kubeconfigs()
    if not kubeconfigs:
        raise typer.BadParameter(f"no cluster found: {hint}")
    return settings, kubeconfigs


@contextmanager
def stage_bars(console: Console, *, width: int, disable: bool = False) -> Iterator[ProgressFn]:
    """One progress bar per stage a run reports (nodes, pods, ...), added as each stage first reports."""
    with Progress(TextColumn(f"{{task.description:<{width}}}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, disable=disable) as bar:
        tasks: dict[str, Any] = {}

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done, total=total)

        yield progress


__all__ = ["Keep", "Nodes", "PolicyName", "ProgressFn", "local_stack", "settings_from_stack", "stack_fallbacks",
           "stage_bars"]
