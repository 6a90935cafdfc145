"""CPU accounting for the bench (cli/cpu_accounting): a child this process starts and reaps counts as the
scheduler under test, this process's own time as the bench, and a difference of samples never goes below 0."""

from __future__ import annotations

import subprocess
import sys
import time

from gpuplace.harness import cpu_accounting
from gpuplace.harness.cpu_accounting import BENCH, COMPONENTS, SCHEDULER


def test_a_child_that_burns_cpu_and_is_reaped_counts_as_the_scheduler_under_test() -> None:
    before = cpu_accounting.sample()
    subprocess.run([sys.executable, "-c", "import time\nend = time.process_time() + 0.6\n"
                    "while time.process_time() < end: pass"], check=True)
    spent = cpu_accounting.spent(before, cpu_accounting.sample())
    assert spent[SCHEDULER] >= 0.5
    assert set(spent) == {*COMPONENTS, "other"}


def test_this_process_counts_as_the_bench() -> None:
    before = cpu_accounting.sample()
    end = time.process_time() + 0.4
    while time.process_time() < end:
        pass
    spent = cpu_accounting.spent(before, cpu_accounting.sample())
    assert spent[BENCH] >= 0.3 and spent[SCHEDULER] == 0.0


def test_a_difference_is_rounded_and_never_negative() -> None:
    assert cpu_accounting.spent({"etcd": 5.0, "kafka": 1.0}, {"etcd": 4.0, "kafka": 1.26}) == {"etcd": 0.0,
                                                                                             "kafka": 0.3}


def test_a_live_service_child_is_reported_by_its_service_name_as_part_of_the_scheduler() -> None:
    # the child says when it has burnt its 0.5 s of CPU: on a loaded machine a fixed wait may see less of it
    burn = ("import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass\n"
            "print('burnt', flush=True)\ntime.sleep(30)")
    before = cpu_accounting.sample()
    child = subprocess.Popen([sys.executable, "-c", burn, "service", "placement"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "burnt"
        spent = cpu_accounting.spent(before, cpu_accounting.sample())
    finally:
        child.kill()
        child.wait()
    detail = cpu_accounting.DETAIL + "placement"
    assert cpu_accounting.is_detail(detail) and not cpu_accounting.is_detail(SCHEDULER)
    assert spent[detail] >= 0.3 and spent[SCHEDULER] >= spent[detail]
