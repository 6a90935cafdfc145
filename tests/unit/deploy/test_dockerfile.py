"""The Dockerfile's rules that matter for running it in a cluster, read from the file itself (the image is built
by deploy/image/build-without-registry.sh, not by the test suite: no machine of this project runs a Docker engine).

A final stage that runs as a numeric non-root user (Kubernetes' runAsNonRoot can only verify a number), installs
exactly what requirements.lock pins and no dev extras, carries no secret in ENV/ARG, and leaves health checks to
the Kubernetes probes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SECRETISH = re.compile(r"PASSWORD|SECRET|TOKEN|DATABASE_URL|_KEY\b|CREDENTIAL", re.IGNORECASE)


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    logical, parts = [], []
    for line in text.splitlines():
        stripped = line.strip()
        if not parts and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        parts.append(stripped.removesuffix("\\").strip())
        if not stripped.endswith("\\"):
            logical.append(" ".join(parts))
            parts = []
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in logical]


@pytest.fixture(scope="module")
def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for instruction in instructions((ROOT / "Dockerfile").read_text()):
        if instruction[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


def test_instruction_parser_joins_continuations() -> None:
    assert instructions("# c\nFROM a AS b\nRUN x \\\n  && y\n# c2\nUSER 1:1\n") == [
        ("FROM", "a AS b"), ("RUN", "x && y"), ("USER", "1:1")]


def test_the_base_is_python_311_slim(stages: list[list[tuple[str, str]]]) -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim(-bookworm)?$", text, re.MULTILINE)
    assert all(stage[0][1].split()[0] == "${PYTHON_IMAGE}" for stage in stages)


def test_the_final_stage_runs_as_a_numeric_non_root_user(stages: list[list[tuple[str, str]]]) -> None:
    users = [args for name, args in stages[-1] if name == "USER"]
    assert users, "the final stage sets no USER: it would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) > 0 and (not gid or (gid.isdigit() and int(gid) > 0))
    assert stages[-1][-1][0] in ("CMD", "ENTRYPOINT", "USER", "WORKDIR"), "nothing may run after USER as root"
    after_user = stages[-1][[n for n, _ in stages[-1]].index("USER"):]
    assert "RUN" not in [n for n, _ in after_user]


def test_dependencies_are_installed_as_the_lock_pins_them_without_dev_extras(
        stages: list[list[tuple[str, str]]]) -> None:
    installs = [args for stage in stages for name, args in stage if name == "RUN" and "pip install" in args]
    assert installs, "no pip install"
    for command in installs:
        assert "-c requirements.lock" in command
        assert "[dev]" not in command and "-e " not in command
    copies = [args for stage in stages for name, args in stage if name == "COPY"]
    assert any("requirements.lock" in args for args in copies)


def test_no_secret_is_baked_into_env_or_arg(stages: list[list[tuple[str, str]]]) -> None:
    for stage in stages:
        for name, args in stage:
            if name in ("ENV", "ARG"):
                keys = re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", args) or [args.split()[0]]
                assert not [k for k in keys if SECRETISH.search(k)], f"{name} {args}"


def test_health_is_left_to_kubernetes_probes(stages: list[list[tuple[str, str]]]) -> None:
    assert "HEALTHCHECK" not in [name for stage in stages for name, _ in stage]


def test_the_build_context_is_only_what_the_image_installs() -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    ignore = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert ignore[0] == "*", "everything is excluded first, then what the image installs is let back in"
    assert {"!requirements.lock", "!pyproject.toml", "!README.md", "!libs/", "!services/"} <= set(ignore)
