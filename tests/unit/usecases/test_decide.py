"""Which policy instance the Decider hands out: rebuilt on the learned workload, or kept when it learns online.

FGD is rebuilt every REFRESH_EVERY pods on the window of recent pods. A policy that learns the workload itself
(interface.learns_online) is built once per cluster and kept, and the planner's hypothetical placements go to an
instance of their own so that they never count as arrivals of the serving one.
"""

import re

import pytest
from pydantic import ValidationError

from gpuplace.core.framework.interface import PolicyContext, learns_online
from gpuplace.core.model import GpuRequest
from gpuplace.core.policies import registry
from gpuplace.core.policies.baselines.best_fit import BestFit
from gpuplace.core.policies.gpuplace import policy as gpuplace_policy
from gpuplace.core.policies.gpuplace.policy import Gpuplace
from gpuplace.core.policies.gpuplace.shape_estimate import declared_shapes
from gpuplace.core.snapshot import ClusterSnapshot
from gpuplace.settings import Settings
from gpuplace.usecases import provenance
from gpuplace.usecases.cluster_view import ClusterView
from gpuplace.usecases.decide import REFRESH_EVERY, Decider, parse_expected_shapes

from ..core.builders import make_node, make_pod


class OnlineBestFit(BestFit):
    """BestFit that says it learns online: the Decider's handling, apart from any one policy's internals."""

    learns_online = True


def view(cluster: str = "east") -> ClusterView:
    nodes = [make_node(f"n{i}").gpus(2).build() for i in range(3)]
    return ClusterView(cluster, ClusterSnapshot(nodes))


def pods(n: int):
    return [make_pod(f"p{i}").cpu(1).gpu_share(250 * (1 + i % 3)).build() for i in range(n)]


@pytest.fixture
def online_policy(monkeypatch) -> str:
    monkeypatch.setitem(registry.POLICIES, "online-bestfit", OnlineBestFit)
    return "online-bestfit"


def test_fgd_is_rebuilt_every_refresh_and_on_a_new_snapshot():
    decide, east = Decider("fgd"), view()
    served = [decide.policy(east, pod, None) for pod in pods(REFRESH_EVERY + 1)]
    assert all(p is served[0] for p in served[:REFRESH_EVERY])
    assert served[REFRESH_EVERY] is not served[0]
    assert decide.policy(view(), pods(1)[0], None) is not served[REFRESH_EVERY]  # another snapshot uid


def test_fgd_plans_on_the_serving_instance_without_feeding_its_window():
    decide, east = Decider("fgd"), view()
    first = decide.policy(east, pods(1)[0], None)
    for pod in pods(2 * REFRESH_EVERY):
        assert decide.planner_policy(east, pod, None) is first
    served = [decide.policy(east, pod, None) for pod in pods(REFRESH_EVERY)]
    assert all(p is first for p in served[:-1]) and served[-1] is not first  # the planner's pods did not count


def test_an_online_learner_is_built_once_per_cluster(online_policy):
    decide, east = Decider(online_policy), view()
    assert decide.learns_online
    first = decide.policy(east, pods(1)[0], None)
    for pod in pods(3 * REFRESH_EVERY):
        assert decide.policy(east, pod, None) is first
    assert decide.policy(view(), pods(1)[0], None) is first  # a new snapshot: the policy follows it itself
    assert decide.policy(view("west"), pods(1)[0], None) is not first


def test_the_planner_has_its_own_instance_of_an_online_learner(online_policy):
    decide, east = Decider(online_policy), view()
    planning = decide.planner_policy(east, pods(1)[0], None)  # before any pod was served
    serving = decide.policy(east, pods(1)[0], None)
    assert planning is not serving
    for pod in pods(2 * REFRESH_EVERY):
        assert decide.planner_policy(east, pod, None) is planning
        assert decide.policy(east, pod, None, learn=False) is planning
    assert decide.policy(east, pods(1)[0], None) is serving


def test_gpuplace_keeps_its_serving_instance_and_plans_on_another():
    assert learns_online(Gpuplace)
    decide, east = Decider("gpuplace"), view()
    serving = decide.policy(east, pods(1)[0], None)
    for pod in pods(REFRESH_EVERY + 50):
        assert decide.policy(east, pod, None) is serving
    assert decide.planner_policy(east, pods(1)[0], None) is not serving


@pytest.mark.parametrize(("setting", "scale"), [(None, 1.0), (0.0, 0.0), (2.0, 2.0)])
def test_the_whole_gpu_reserve_setting_reaches_every_cluster_policy(setting, scale, monkeypatch):
    """GPUPLACE_WHOLE_GPU_RESERVE -> Settings -> the Decider's options -> each cluster's gpuplace (unset: the
    policy's default)."""
    monkeypatch.setattr(gpuplace_policy, "WHOLE_GPU_RESERVE", 1.0)
    if setting is not None:
        monkeypatch.setenv("GPUPLACE_WHOLE_GPU_RESERVE", str(setting))
    settings = Settings()
    assert settings.whole_gpu_reserve == setting
    decider = Decider("gpuplace", options=PolicyContext(whole_gpu_reserve=settings.whole_gpu_reserve))
    for cluster in ("east", "west"):
        policy = decider.policy(view(cluster), pods(1)[0], None)
        assert isinstance(policy, Gpuplace) and policy._reserve_scale == scale


def test_a_negative_whole_gpu_reserve_is_refused(monkeypatch):
    monkeypatch.setenv("GPUPLACE_WHOLE_GPU_RESERVE", "-1")
    with pytest.raises(ValidationError, match="whole_gpu_reserve"):
        Settings()


def test_expected_shapes_parse_into_gpu_requests():
    assert parse_expected_shapes(" 8xgpu, 4xgpu@NVIDIA-H200|NVIDIA-H100-80GB-HBM3,1x20480Mi,1x500m ,") == (
        GpuRequest(8, share_milli=1000), GpuRequest(4, share_milli=1000,
                                                    allowed_models=("NVIDIA-H200", "NVIDIA-H100-80GB-HBM3")),
        GpuRequest(1, memory_mib=20480), GpuRequest(1, share_milli=500))
    assert parse_expected_shapes("") == ()


@pytest.mark.parametrize("text", ["8", "xgpu", "0xgpu", "-1xgpu", "8xGPU", "1x1500m", "1x20GiB", "2x"])
def test_a_bad_expected_shape_names_its_entry(text):
    with pytest.raises(ValueError, match=f"expected shape '{re.escape(text)}'"):
        parse_expected_shapes(f"8xgpu,{text}")


def test_expected_shapes_reach_the_policy_and_the_config_digest():
    """The declared shapes join gpuplace's prior (shape_estimate.declared_shapes), and a decision's config digest
    changes with them; with no option set it is the digest it was before the options existed."""
    expected = parse_expected_shapes("8xgpu")
    decider = Decider("gpuplace", options=PolicyContext(expected_shapes=expected))
    policy = decider.policy(view(), pods(1)[0], None)
    assert isinstance(policy, Gpuplace) and policy._declared == declared_shapes(expected, gpuplace_policy.DECLARED_PODS)
    plain = provenance.config_digest("gpuplace", 0.1)
    assert provenance.config_digest("gpuplace", 0.1, PolicyContext()) == plain
    assert provenance.config_digest("gpuplace", 0.1, PolicyContext(expected_shapes=expected)) != plain
    assert provenance.config_digest("gpuplace", 0.1, PolicyContext(whole_gpu_reserve=0.0)) != plain
