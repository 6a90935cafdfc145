"""Reading the Alibaba trace files into model objects (synthetic files, same columns)."""

import pytest

from gpuplace.traces import alibaba

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn-0,64000,262144,2,V100M16\nn-1,32000,131072,0,\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
    "p-0,6000,12288,1,460,,LS,Running,0,1,0\n"
    "p-1,8000,30517,0,0,T4,BE,Running,0,1,0\n"
    "p-2,12000,16384,2,1000,V100M16|T4,LS,Running,0,1,0\n"
)


@pytest.fixture
def trace(tmp_path, monkeypatch):
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(NODES)
    (tmp_path / "openb_pod_list_default.csv").write_text(PODS)
    (tmp_path / "openb_pod_list_cpu050.csv").write_text(PODS)
    monkeypatch.setenv(alibaba.TRACE_DIR_ENV, str(tmp_path))
    return tmp_path


def test_short_names_resolve_in_the_trace_directory(trace):
    assert alibaba.pod_file("default") == trace / "openb_pod_list_default.csv"
    assert alibaba.node_file() == trace / "openb_node_list_gpu_node.csv"
    assert alibaba.trace_names() == ("default", "cpu050")
    with pytest.raises(alibaba.TraceError, match="no such file"):
        alibaba.pod_file("nope")


def test_pods_carry_share_count_and_allowed_models(trace):
    pods = alibaba.read_pods(alibaba.pod_file("default"))
    assert [(p.name, p.cpu_milli, p.memory_mib) for p in pods][0] == ("p-0", 6000, 12288)
    assert (pods[0].gpu.count, pods[0].gpu.share_milli, pods[0].gpu.allowed_models) == (1, 460, ())
    assert not pods[1].gpu.needs_gpu  # gpu_spec ignored on a CPU-only pod
    assert (pods[2].gpu.count, pods[2].gpu.share_milli, pods[2].gpu.allowed_models) == (2, 1000, ("V100M16", "T4"))


def test_nodes_carry_their_gpus(trace):
    nodes = alibaba.read_nodes(alibaba.node_file())
    first = nodes[0]
    assert (first.name, len(first.gpus), first.gpu_model, first.gpu_memory_mib) == ("n-0", 2, "V100M16", 16384)
    assert nodes[1].gpus == ()


def test_malformed_files_name_the_line(tmp_path):
    bad = tmp_path / "pods.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,lots,1,0,0\n")
    with pytest.raises(alibaba.TraceError, match="pods.csv:2: cpu_milli"):
        alibaba.read_pods(bad)
    (tmp_path / "nodes.csv").write_text("sn,cpu_milli\n")
    with pytest.raises(alibaba.TraceError, match="missing column"):
        alibaba.read_nodes(tmp_path / "nodes.csv")
