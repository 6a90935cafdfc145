"""The chaos bench leaves the broker's own downtime out of a partition's stall."""

from gpuplace.harness.chaos_probes import LagMonitor, overlap


def test_overlap_counts_only_the_part_of_a_wait_inside_the_windows():
    assert overlap(10.0, 50.0, [[0.0, 20.0], [30.0, 35.0], [60.0, 70.0]]) == 15.0
    assert overlap(10.0, 50.0, [[40.0, None]]) == 10.0  # a restart still under way counts up to now


def test_a_stall_across_a_kafka_restart_is_counted_without_the_restart():
    monitor = LagMonitor("127.0.0.1:1", {}, away=[[10.0, 40.0]])
    key = ("g", "t", 0)
    monitor._last_ok = 5.0
    monitor.observe(key, 3, 100, 5.0)  # records waiting from 5 s
    monitor.observe(key, 3, 100, 45.0)  # still unmoved at 45 s: 40 s, of which Kafka was away 30
    assert monitor.partitions[key].longest_s == 10.0
