"""Which of a node's pods gpu-agent scrapes, at which URL, on which GPU and beside whom."""

import json

from gpuplace.adapters.pod_metrics.targets import LATENCY_PATH, LATENCY_PORT, scrape_targets


def pod(name, *, gpus=(0,), port="9400", phase="Running", ip="10.0.0.7", **annotations):
    notes = {"gpuplace.io/workload": "detector", "gpuplace.io/deadline-ms": "33.3", **annotations}
    if gpus is not None:
        notes["gpuplace.io/gpu-assignment"] = json.dumps({"gpus": [{"index": i, "memory_mib": 4000} for i in gpus]})
    if port is not None:
        notes[LATENCY_PORT] = port
    return {"metadata": {"name": name, "namespace": "perception", "uid": f"uid-{name}", "annotations": notes},
            "status": {"phase": phase, "podIP": ip}}


def test_an_opted_in_pod_is_scraped_at_its_ip_and_port_with_its_co_runners():
    pods = [pod("a"), pod("b", port=None), pod("c", gpus=(1,)), pod("d", phase="Pending"),
            pod("e", **{LATENCY_PATH: "/stats"}, ip="fd00::7")]
    targets, skipped = scrape_targets(pods)
    assert skipped == []
    a, c, e = targets
    # b is on GPU 0 too and counts as a co-runner without opting in; c is alone on GPU 1; d is not running
    assert c.gpu_index == 1 and c.co_runners == ()
    assert (a.url, a.gpu_index, a.workload, a.deadline_ms) == ("http://10.0.0.7:9400/metrics", 0, "detector", 33.3)
    assert a.co_runners == ("perception/b", "perception/e") and a.uid == "uid-a"
    assert e.url == "http://[fd00::7]:9400/stats" and e.co_runners == ("perception/a", "perception/b")


def test_pods_that_cannot_be_scraped_are_skipped_with_a_reason():
    pods = [pod("port", port="http"), pod("path", **{LATENCY_PATH: "metrics"}), pod("nogpu", gpus=None),
            pod("noip", ip=""), pod("deadline", **{"gpuplace.io/deadline-ms": "soon"})]
    targets, skipped = scrape_targets(pods)
    assert targets == []
    reasons = {s.pod: s.reason for s in skipped}
    assert "not a port number" in reasons["port"] and "must start with /" in reasons["path"]
    assert "gpu-assignment" in reasons["nogpu"] and "no pod IP" in reasons["noip"]
    assert "not a number" in reasons["deadline"]


def test_a_pod_without_a_workload_is_reported_under_its_name():
    [target], _ = scrape_targets([pod("solo", **{"gpuplace.io/workload": ""})])
    assert target.workload == "solo" and target.co_runners == ()
