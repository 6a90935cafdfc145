"""Tables piped to a file are whole: `gpuplace sim ... > out.txt` used to cut the table at rich's 80 columns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpuplace.traces import alibaba

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(f"n-{i},64000,262144,4,T4\n" for i in range(4))
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + "".join(
    f"p-{i:03d},4000,8192,1,{[250, 500, 1000][i % 3]},\n" for i in range(40))


def test_a_table_piped_to_a_file_is_not_cut_at_80_columns(tmp_path: Path) -> None:
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(NODES)
    (tmp_path / "openb_pod_list_default.csv").write_text(PODS)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update({alibaba.TRACE_DIR_ENV: str(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path)})
    out = tmp_path / "table.txt"
    script = ("import sys; sys.argv = ['gpuplace', 'sim', '--policy', 'random', '--seeds', '5']; "
              "from gpuplace.cli.app import main; main()")
    with out.open("w") as file:  # a file, not a terminal, as `> table.txt` gives it
        subprocess.run([sys.executable, "-c", script], stdout=file, env=env, timeout=120, check=True)
    text = out.read_text()
    for header in ("unalloc@100", "unalloc@130", "short of 100%", "most failed", "s/run"):
        assert header in text, text
    assert "…" not in text and max(map(len, text.splitlines())) > 80
