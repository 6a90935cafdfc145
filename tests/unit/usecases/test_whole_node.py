"""The whole node counts: other schedulers' pods are charged, the node's rules hold, the pod is told why."""

from __future__ import annotations

import json

from gpuplace.contracts.events import GpuRequest, HostPort, Toleration
from gpuplace.usecases.deciding import Deciding
from gpuplace.usecases.placement import AWAITING_NODE
from tests.builders import node_event, pod_event
from tests.fakes import FakeUnitOfWorkFactory
from tests.unit.usecases.test_placement import service

WHOLE_GPU = GpuRequest(gpu_count=1, share_milli_per_gpu=1000)


def last_reasons(uow_factory: FakeUnitOfWorkFactory, pod: str) -> dict[str, str]:
    payloads = [json.loads(r["payload"]) for r in uow_factory.db.outbox]
    return [p["reasons"] for p in payloads if p["pod"] == pod and p["kind"] == "unschedulable"][-1]


async def test_another_schedulers_whole_gpu_pod_keeps_gpuplace_off_its_gpu(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=2))
    # kube-scheduler bound a pod asking for one whole GPU on n1: GPU 0 is charged as taken (the emptiest GPU,
    # the lowest index first), so a 9420 MiB slice goes to GPU 1 and a second slice of 9420 MiB fits nowhere.
    await placement.on_pod(pod_event("trainer", kind="bound", node_name="n1", gpu=WHOLE_GPU, managed=False,
                                     cpu_milli=8000))
    await placement.on_pod(pod_event("slam-0"))
    await placement.on_pod(pod_event("slam-1"))
    await placement.drain()
    assert api.bound == {("robots", "slam-0"): "n1"}
    gpus = {(g["node"], g["index"]): g["share_assigned_milli"] for g in uow_factory.db.gpus.values()}
    assert gpus[("n1", 0)] == 1000  # the other scheduler's pod
    # CPU: 8 cores of the other pod + 1 core of slam-0
    assert uow_factory.db.nodes[("east", "n1")]["cpu_assigned_milli"] == 9000
    assert api.bind_calls == 1  # gpuplace never binds another scheduler's pod


async def test_another_schedulers_pod_that_ends_gives_its_resources_back(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=1))
    trainer = pod_event("trainer", kind="bound", node_name="n1", gpu=WHOLE_GPU, managed=False)
    await placement.on_pod(trainer)
    await placement.on_pod(pod_event("slam-0"))
    await placement.drain()
    assert api.bound == {}
    # deleted (or finished: the watcher sends a Succeeded pod as deleted): the GPU and its CPU come back
    api.gone.add("trainer")  # gone from the apiserver: its deletion is believed
    await placement.on_pod(pod_event("trainer", uid=trainer.uid, kind="deleted", node_name="n1", gpu=WHOLE_GPU,
                                     managed=False))
    await placement.drain()
    assert api.bound == {("robots", "slam-0"): "n1"}
    assert uow_factory.db.nodes[("east", "n1")]["cpu_assigned_milli"] == 1000  # slam-0 only


async def test_a_pod_bound_before_its_node_is_known_is_charged_when_the_node_arrives(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n0", gpus=0))  # the cluster exists, n1 not yet
    await placement.on_pod(pod_event("trainer", kind="bound", node_name="n1", gpu=WHOLE_GPU, managed=False))
    row = next(p for p in uow_factory.db.pods.values() if p["name"] == "trainer")
    assert (row["state"], row["reason"]) == ("bound", AWAITING_NODE)
    await placement.on_node(node_event("n1", gpus=1))
    row = next(p for p in uow_factory.db.pods.values() if p["name"] == "trainer")
    assert row["reason"] is None
    assert uow_factory.db.gpus[("east", "n1", 0)]["share_assigned_milli"] == 1000


async def test_a_cpu_only_pod_gives_its_cpu_back_when_deleted(uow_factory, api):
    # A pod without GPUs holds no allocation row; its CPU was still charged to its node and must come back.
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", cpu_milli=4000))
    web = pod_event("web", memory_mib=None, cpu_milli=3000)
    await placement.on_pod(web)
    await placement.drain()
    assert uow_factory.db.nodes[("east", "n1")]["cpu_assigned_milli"] == 3000
    api.gone.add("web")  # gone from the apiserver: its deletion is believed
    await placement.on_pod(pod_event("web", uid=web.uid, kind="deleted", memory_mib=None, cpu_milli=3000))
    assert uow_factory.db.nodes[("east", "n1")]["cpu_assigned_milli"] == 0


async def test_taints_cordons_and_not_ready_nodes_keep_pods_off_with_the_rule_named(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("tainted", taints=("dedicated=infra:NoSchedule",)))
    await placement.on_node(node_event("cordoned", unschedulable=True))
    await placement.on_node(node_event("down", ready=False))
    await placement.on_pod(pod_event("slam-0"))
    await placement.drain()
    assert api.bound == {}
    reasons = " ".join(last_reasons(uow_factory, "slam-0").values())
    assert "2 node(s): node(s) had untolerated taint(s)" in reasons  # the taint and the not-ready taint
    assert "1 node(s): node(s) were unschedulable" in reasons

    tolerant = pod_event("infra-0", tolerations=(Toleration(key="dedicated", operator="Equal", value="infra",
                                                             effect="NoSchedule"),))
    await placement.on_pod(tolerant)
    await placement.drain()
    assert api.bound == {("robots", "infra-0"): "tainted"}


async def test_selectors_pod_slots_and_host_ports(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("a", labels={"zone": "a"}, max_pods=1))
    await placement.on_node(node_event("b", labels={"zone": "b"}))
    await placement.on_pod(pod_event("in-b", memory_mib=None, node_selector={"zone": "b"},
                                     host_ports=(HostPort(port=80),)))
    await placement.on_pod(pod_event("port-80", memory_mib=None, node_selector={"zone": "b"},
                                     host_ports=(HostPort(port=80),)))
    await placement.on_pod(pod_event("in-a", memory_mib=None, node_selector={"zone": "a"}))
    await placement.on_pod(pod_event("in-a-2", memory_mib=None, node_selector={"zone": "a"}))
    await placement.drain()
    assert api.bound == {("robots", "in-b"): "b", ("robots", "in-a"): "a"}
    assert "didn't have free ports" in " ".join(last_reasons(uow_factory, "port-80").values())
    assert "Too many pods" in " ".join(last_reasons(uow_factory, "in-a-2").values())


async def test_a_burst_of_node_events_is_read_once_and_retries_only_pods_the_nodes_could_take(
        uow_factory, api, monkeypatch):
    from tests.fakes import FakeNodes

    reads = []
    load_nodes = FakeNodes.load_nodes

    async def counted(self, cluster):
        reads.append(cluster)
        return await load_nodes(self, cluster)

    monkeypatch.setattr(FakeNodes, "load_nodes", counted)
    placement = service(uow_factory, api)
    await placement.on_node(node_event("small", gpu_memory_mib=8192, labels={"zone": "a"}))
    await placement.on_pod(pod_event("big-in-a", memory_mib=12000, node_selector={"zone": "a"}))
    await placement.on_pod(pod_event("big-in-b", memory_mib=12000, node_selector={"zone": "b"}))
    await placement.drain()
    before = len(reads)
    tried = []
    try_place = Deciding.try_place

    async def recorded(self, state, row):
        tried.append(row["name"])
        await try_place(self, state, row)

    monkeypatch.setattr(Deciding, "try_place", recorded)
    for i in range(40):  # a fleet of zone-b nodes comes up, all at once
        await placement.on_node(node_event(f"b{i}", labels={"zone": "b"}))
    await placement.drain()
    assert len(reads) - before <= 2  # one re-read for the burst (two if the burst straddles the window)
    assert set(tried) == {"big-in-b"}  # big-in-a may not use a zone-b node: not tried
    assert api.bound == {("robots", "big-in-b"): "b0"}
    settled = len(reads)
    for i in range(3):  # the view is fresh again: pods are decided on it, not after another re-read each
        await placement.on_pod(pod_event(f"slam-{i}"))
    await placement.drain()
    assert len(reads) == settled


async def test_a_pod_nominated_by_another_scheduler_is_charged_there_until_it_lands(uow_factory, api):
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=1))
    await placement.on_node(node_event("n2", gpus=1))
    await placement.drain()
    # kube-scheduler preempted for the trainer on n1: it is pending there, nominated, and counts on n1 already
    trainer = pod_event("trainer", gpu=WHOLE_GPU, managed=False, nominated_node_name="n1")
    await placement.on_pod(trainer)
    assert uow_factory.db.gpus[("east", "n1", 0)]["share_assigned_milli"] == 1000
    # it lands on n2 after all: the charge moves with it
    landed = pod_event("trainer", uid=trainer.uid, kind="bound", node_name="n2", gpu=WHOLE_GPU, managed=False,
                       nominated_node_name="n1")
    api.runs_elsewhere(landed)
    await placement.on_pod(landed)
    assert uow_factory.db.gpus[("east", "n1", 0)]["share_assigned_milli"] == 0
    assert uow_factory.db.gpus[("east", "n2", 0)]["share_assigned_milli"] == 1000
    await placement.on_pod(pod_event("slam-0"))
    await placement.drain()
    assert api.bound == {("robots", "slam-0"): "n1"}


async def test_a_pod_bound_just_after_its_node_arrived_is_charged_at_once(uow_factory, api):
    # The node event marks the view stale and its re-read waits for the burst to end (NODE_BURST_S); a pod bound
    # to that node meanwhile must still be charged on it, not parked as if the node were unknown.
    placement = service(uow_factory, api)
    await placement.on_node(node_event("n1", gpus=1))
    await placement.on_pod(pod_event("trainer", kind="bound", node_name="n1", gpu=WHOLE_GPU, managed=False))
    row = next(p for p in uow_factory.db.pods.values() if p["name"] == "trainer")
    assert (row["state"], row["reason"]) == ("bound", None)
    assert uow_factory.db.gpus[("east", "n1", 0)]["share_assigned_milli"] == 1000
