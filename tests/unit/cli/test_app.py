"""The root command: what `gpuplace --help` says first, `--version`, and a description on every command."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from typing import Any

import typer
from typer.testing import CliRunner

from gpuplace.cli import app as cli


def _root() -> Any:
    """The Click group behind the Typer app (Typer vendors its own Click, so no isinstance on click.Group)."""
    cli._register_all()
    return typer.main.get_command(cli.app)


def test_help_starts_with_what_gpuplace_does() -> None:
    _root()
    result = CliRunner().invoke(cli.app, ["--help"])
    assert result.exit_code == 0
    first = " ".join(result.output.split()).split("COMMAND [ARGS]... ", 1)[1]  # the text after the usage line
    assert first.startswith("gpuplace places GPU pods on Kubernetes fleets")


def test_version() -> None:
    _root()
    result = CliRunner().invoke(cli.app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"gpuplace {importlib.metadata.version('gpuplace')}"


def test_every_command_has_a_description() -> None:
    def walk(command: Any, path: str) -> list[str]:
        missing = [] if (command.help or "").strip() else [path]
        for name, sub in getattr(command, "commands", {}).items():
            missing += walk(sub, f"{path} {name}")
        return missing

    root = _root()
    assert {"service", "up", "migrate", "demo", "bench", "sim"} <= set(root.commands)
    assert walk(root, "gpuplace") == []


def test_version_answers_without_importing_the_commands() -> None:
    """`gpuplace --version` in a fresh interpreter, as a user runs it: none of the libraries the commands need is
    imported (they made it take 2 s), read from the interpreter's own import log."""
    script = "import sys; sys.argv = ['gpuplace', '--version']; from gpuplace.cli.app import main; main()"
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", script], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, timeout=60, check=True)
    assert done.stdout.strip() == f"gpuplace {importlib.metadata.version('gpuplace')}"
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")}
    heavy = {"sqlalchemy", "aiokafka", "kubernetes_asyncio", "numpy", "pydantic", "faststream", "rich.table",
             "gpuplace.adapters", "gpuplace.core"}
    assert imported and not heavy & imported, sorted(heavy & imported)
