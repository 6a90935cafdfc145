"""`gpuplace report --fleet` from a report's JSON (the shape a simulated run is put in): the page is one
self-contained file with its plots, and a headless Chromium renders it (a screenshot with the plots' colours)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image
from typer.testing import CliRunner

from gpuplace.cli import app as cli
from gpuplace.usecases.fleet_sources import from_database
from tests.unit.usecases.test_fleet_report import hand_made_fleet

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
STRANDED_RED = (0xC4, 0x4E, 0x52)  # the stranded bars' colour (cli/report_page.py)


def _invoke(*args: str) -> tuple[int, str]:
    cli._register_all()
    result = CliRunner().invoke(cli.app, ["report", *args])
    return result.exit_code, result.output


async def _page(tmp_path: Path) -> Path:
    source = tmp_path / "fleet.json"
    source.write_text(json.dumps((await from_database(await hand_made_fleet())).as_json()), encoding="utf-8")
    page = tmp_path / "fleet.html"
    code, out = _invoke("--fleet", "--input", str(source), "-o", str(page))
    assert code == 0, out
    assert f"wrote {page} (3 cluster(s), 4 GPU(s), 2 pod(s) waiting)" in out
    return page


async def test_the_page_is_one_file_with_its_tables_and_plots(tmp_path):
    body = (await _page(tmp_path)).read_text(encoding="utf-8")
    assert body.count('src="data:image/png;base64,') == 3  # memory, latency, waiting
    assert "<script" not in body and "http://" not in body and "https://" not in body and "<link" not in body
    for text in ("us-east", "eu-west", "unschedulable: GpuFit", "98.00 %", "6.8 (21.3 %)"):
        assert text in body


async def test_json_prints_the_figures_of_the_page(tmp_path):
    source = tmp_path / "fleet.json"
    figures = (await from_database(await hand_made_fleet())).as_json()
    source.write_text(json.dumps(figures), encoding="utf-8")
    code, out = _invoke("--fleet", "--input", str(source), "--json", "--cluster", "east")
    assert code == 0, out
    printed = json.loads(out)
    assert [c["cluster"] for c in printed["clusters"]] == ["east"]
    assert printed["fleet"]["gpu_memory_stranded_mib"] == pytest.approx(6964.0)


@pytest.mark.parametrize(("args", "says"), [
    ((), "say which report: --fleet"),
    (("--fleet", "--policy", "fgd"), "--policy replays a log: it needs --log"),
    (("--fleet", "--log", "a.jsonl", "--input", "b.json"), "two sources"),
    (("--fleet", "--log", "nowhere.jsonl"), "--log nowhere.jsonl: no such file"),
])
def test_a_wrong_invocation_is_one_clear_error(args, says):
    code, out = _invoke(*args)
    assert code == 1 and says in out


async def test_a_headless_browser_renders_the_page_with_its_plots(tmp_path):
    browser = next((found for name in BROWSERS if (found := shutil.which(name))), None)
    assert browser, ("no headless browser to render the fleet report: install Debian's chromium "
                     "(deploy/local/install-deps.sh does)")
    page = await _page(tmp_path)
    shot = tmp_path / "fleet.png"
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--screenshot={shot}", "--window-size=1400,2000", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    pixels = (image.imread(shot)[:, :, :3] * 255).round().astype(int)  # PNG: floats in [0, 1]
    assert pixels.shape[:2] == (2000, 1400)
    assert (pixels < 250).any(axis=2).mean() > 0.02  # not blank: text, tables, bars
    red = (np.abs(pixels - np.array(STRANDED_RED)).max(axis=2) <= 6).sum()
    assert red > 2000  # the stranded bar of the memory plot, drawn from its data URI
