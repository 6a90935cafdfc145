"""The Helm chart (deploy/helm/gpuplace) as the real kube-apiserver of the local stack judges it.

`helm template` (helm built by deploy/local/stack.sh, GPUPLACE_STACK_HELM) renders the chart, with the default
values and with two clusters, a ServiceMonitor, Kafka SASL/TLS and gpu-agent turned on; every object is sent to
the apiserver as a server-side apply with dryRun=All and fieldValidation=Strict, so a field the API does not know,
a wrong type or an invalid name fails here, and nothing is stored. The ServiceMonitor kind needs its CRD: a minimal
one (monitoring.coreos.com/v1, schema left open) is installed once and kept, under the CRD's fixed name, labelled
as this test's; the Prometheus Operator's own CRD, where installed, is used as it is.

The chart's RBAC is held to deploy/k8s/rbac.yaml (the rules, exactly), and its leader-election Role is created
for real in the test's namespace and checked with SubjectAccessReviews.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from gpuplace.adapters.kube.cluster_api import raw_json
from gpuplace.cli.services import SERVICES
from gpuplace.harness.stack_env import resolve
from gpuplace.settings import Settings

from .conftest import eventually, unique_name

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "gpuplace"
RBAC_YAML = ROOT / "deploy" / "k8s" / "rbac.yaml"
FIELD_MANAGER = "gpuplace-chart-test"
METRICS = (
    "gpuplace_scheduling_attempts_total", "gpuplace_scheduling_attempt_duration_seconds", "gpuplace_pending_pods",
    "gpuplace_binds_total", "gpuplace_bind_failures_total", "gpuplace_evictions_total", "gpuplace_defrag_plans_total",
    "gpuplace_stranded_gpu_share", "gpuplace_stranded_gpu_memory_bytes", "gpuplace_slo_attainment_ratio",
    "gpuplace_deadline_misses_total", "gpuplace_consumer_lag_records", "gpuplace_outbox_backlog_rows",
    "gpuplace_dead_letters_total", "gpuplace_pod_scheduling_sli_duration_seconds", "gpuplace_node_gpus",
    "gpuplace_node_gpus_allocated", "gpuplace_node_gpu_memory_bytes", "gpuplace_node_gpu_memory_allocated_bytes",
)
PROMETHEUS_RULE_CRD = "prometheusrules.monitoring.coreos.com"
# Two clusters (one in-cluster, one remote by kubeconfig Secret), a standby watcher, SASL_SSL with mutual TLS,
# a ServiceMonitor, gpu-agent, another HTTP port.
FULL_VALUES: dict[str, Any] = {
    "clusters": [{"name": "east", "region": "us-east"},
                 {"name": "west", "region": "us-west", "kubeconfigSecret": "gpuplace-west-kubeconfig",
                  "nodeLabelSelector": "nvidia.com/gpu.present=true", "leaseNamespace": "gpuplace-system",
                  "allowUnenforcedSharing": True}],
    "clusterWatcher": {"replicas": 2},
    "placement": {"replicas": 3},
    "httpPort": 9090,
    "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "gpuAgent": {"enabled": True},
    "kafka": {"bootstrap": "kafka-0.kafka:9093", "securityProtocol": "SASL_SSL",
              "sasl": {"username": "gpuplace", "existingSecret": "gpuplace-kafka"},
              "tls": {"existingSecret": "gpuplace-kafka-tls", "certKey": "tls.crt", "keyKey": "tls.key"}},
    "settings": {"extra": {"telemetry_interval_s": 10}},
}


@pytest.fixture(scope="module")
def helm() -> str:
    path = resolve("GPUPLACE_STACK_HELM")
    if not path or not os.access(path, os.X_OK):
        pytest.fail(f"no helm binary (GPUPLACE_STACK_HELM={path!r}): deploy/local/stack.sh up builds it and writes "
                    "its path into the stack's env file")
    return path


def render(helm: str, namespace: str, values: dict[str, Any] | None = None, release: str = "gp") -> list[dict]:
    """The chart's objects as `helm template` renders them (hooks included), in order."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
        yaml.safe_dump(values or {}, file)
        file.flush()
        result = subprocess.run([helm, "template", release, str(CHART), "--namespace", namespace, "-f", file.name],
                                capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def named(objects: list[dict], kind: str, suffix: str) -> dict:
    [found] = [o for o in by_kind(objects, kind) if o["metadata"]["name"].endswith(suffix)]
    return found


async def _request(api: client.ApiClient, method: str, path: str, *, body: Any = None,
                   query: list[tuple[str, str]] | None = None, content_type: str = "application/json") -> Any:
    """One raw call; an error status raises ApiException with the apiserver's message."""
    response = await api.call_api(path, method, query_params=query or [], body=body,
                                  header_params={"Content-Type": content_type, "Accept": "application/json"},
                                  auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True)
    return await raw_json(response)


class Resources:
    """kind -> (plural, namespaced) per group version, from the apiserver's discovery."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.known: dict[str, dict[str, tuple[str, bool]]] = {}

    async def path(self, obj: dict, namespace: str) -> str:
        group_version = obj["apiVersion"]
        if group_version not in self.known:
            prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
            listing = await _request(self.api, "GET", prefix)
            self.known[group_version] = {r["kind"]: (r["name"], r["namespaced"])
                                         for r in listing["resources"] if "/" not in r["name"]}
        plural, namespaced = self.known[group_version][obj["kind"]]
        prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        scope = f"/namespaces/{obj['metadata'].get('namespace', namespace)}" if namespaced else ""
        return f"{prefix}{scope}/{plural}/{obj['metadata']['name']}"


async def dry_run_apply(api: client.ApiClient, objects: list[dict], namespace: str) -> list[dict]:
    """Server-side apply of every object with dryRun=All: the apiserver validates, defaults and admits each one,
    and stores none. Returns what it answered; the first refusal raises with its message."""
    resources, answers = Resources(api), []
    for obj in objects:
        path = await resources.path(obj, namespace)
        try:
            answers.append(await _request(
                api, "PATCH", path, body=obj, content_type="application/apply-patch+yaml",
                query=[("dryRun", "All"), ("fieldManager", FIELD_MANAGER), ("fieldValidation", "Strict"),
                       ("force", "true")]))
        except ApiException as error:
            raise AssertionError(f"{obj['kind']} {obj['metadata']['name']}: refused: {error.reason}") from error
    return answers


def _open_schema() -> dict[str, Any]:
    return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _prometheus_rule_schema() -> dict[str, Any]:
    """The Prometheus Operator's PrometheusRule schema (monitoring.coreos.com/v1, v0.7x), its spec's fields: strict,
    so a misspelt or misplaced field of a rule is refused as the operator's CRD refuses it."""
    string, text = {"type": "string"}, {"type": "string", "minLength": 1}
    labels = {"type": "object", "additionalProperties": {"type": "string"}}
    rule = {"type": "object", "required": ["expr"], "properties": {
        "alert": string, "record": string, "expr": {"x-kubernetes-int-or-string": True}, "for": string,
        "keep_firing_for": text, "labels": labels, "annotations": labels}}
    group = {"type": "object", "required": ["name"], "properties": {
        "name": text, "interval": string, "query_offset": string, "limit": {"type": "integer"},
        "partial_response_strategy": string, "labels": labels, "rules": {"type": "array", "items": rule}}}
    return {"type": "object", "required": ["spec"], "properties": {
        "apiVersion": string, "kind": string, "metadata": {"type": "object"},
        "spec": {"type": "object", "properties": {"groups": {"type": "array", "items": group}}}}}


async def _ensure_crd(kube: client.ApiClient, plural: str, kind: str, schema: dict[str, Any]) -> None:
    """A monitoring.coreos.com/v1 kind, from a stand-in CRD when the apiserver does not serve it yet (kept: other
    runs use it, and removing a CRD deletes every object of its kind)."""
    name = f"{plural}.monitoring.coreos.com"
    try:
        await _request(kube, "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    except ApiException as error:
        if error.status != 404:
            raise
        crd = {
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": name,
                         "labels": {"gpuplace.io/test-fixture": "helm-chart"},
                         "annotations": {"gpuplace.io/why": "tests/integration/test_helm_chart.py: a stand-in for "
                                         "the Prometheus Operator's CRD"}},
            "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                     "names": {"plural": plural, "singular": plural[:-1], "kind": kind, "listKind": f"{kind}List"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": schema}}]},
        }
        with contextlib.suppress(ApiException):  # 409: another run created it meanwhile
            await _request(kube, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=crd)

    async def served() -> bool:
        try:
            listing = await _request(kube, "GET", "/apis/monitoring.coreos.com/v1")
        except ApiException:
            return False
        return any(r["kind"] == kind for r in listing["resources"])

    await eventually(served, what=f"the apiserver to serve monitoring.coreos.com/v1 {kind}")


@pytest.fixture
async def service_monitor_crd(kube: client.ApiClient) -> None:
    """The ServiceMonitor and PrometheusRule kinds (see _ensure_crd)."""
    await _ensure_crd(kube, "servicemonitors", "ServiceMonitor", _open_schema())
    await _ensure_crd(kube, "prometheusrules", "PrometheusRule", _prometheus_rule_schema())


async def test_default_values_are_accepted_by_the_apiserver(kube: client.ApiClient, namespace: str,
                                                            helm: str) -> None:
    objects = render(helm, namespace)
    answers = await dry_run_apply(kube, objects, namespace)

    assert [(a["kind"], a["metadata"]["name"]) for a in answers] == [
        (o["kind"], o["metadata"]["name"]) for o in objects]
    deployments = [a for a in answers if a["kind"] == "Deployment"]
    assert {d["metadata"]["name"] for d in deployments} == {
        "gp-gpuplace-placement", "gp-gpuplace-telemetry-ingest", "gp-gpuplace-latency-ingest",
        "gp-gpuplace-cluster-watcher-local"}
    assert all(d["metadata"]["namespace"] == namespace for d in deployments)
    # the apiserver defaulted them (it really processed the objects) and stored nothing (dry run)
    assert all(d["spec"]["strategy"]["type"] == "RollingUpdate" for d in deployments)
    with pytest.raises(ApiException) as missing:
        await client.AppsV1Api(kube).read_namespaced_deployment("gp-gpuplace-placement", namespace)
    assert missing.value.status == 404
    assert not by_kind(objects, "ServiceMonitor") and not by_kind(objects, "DaemonSet")


async def test_two_clusters_service_monitor_and_kafka_tls_are_accepted(
        kube: client.ApiClient, namespace: str, helm: str, service_monitor_crd: None) -> None:
    objects = render(helm, namespace, FULL_VALUES)
    answers = await dry_run_apply(kube, objects, namespace)
    assert len(answers) == len(objects)

    monitor = named(answers, "ServiceMonitor", "gpuplace")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["endpoints"][0]["port"] == "http"
    assert len(by_kind(objects, "DaemonSet")) == 1
    # gpu-agent is scraped: a headless Service the ServiceMonitor selects, on the agents' named port
    agent = named(answers, "Service", "gpu-agent")
    assert agent["spec"]["clusterIP"] == "None" and agent["metadata"]["labels"]["gpuplace.io/metrics"] == "true"
    assert agent["spec"]["ports"][0]["targetPort"] == "http"
    assert agent["spec"]["selector"].items() <= named(objects, "DaemonSet", "gpu-agent")["spec"]["template"][
        "metadata"]["labels"].items()
    rule = named(answers, "PrometheusRule", "gpuplace")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"

    watchers = {d["metadata"]["name"]: d for d in by_kind(objects, "Deployment") if "cluster-watcher" in
                d["metadata"]["name"]}
    assert sorted(watchers) == ["gp-gpuplace-cluster-watcher-east", "gp-gpuplace-cluster-watcher-west"]
    for name, deployment in watchers.items():
        cluster = name.rsplit("-", 1)[1]
        env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["GPUPLACE_CLUSTER"] == cluster
        # the cluster the chart runs in through the pod's own (rotated) token, no kubeconfig around it (issue 37)
        assert env["GPUPLACE_KUBECONFIG"] == ("in-cluster" if cluster == "east" else
                                              f"/etc/gpuplace/clusters/{cluster}/kubeconfig")
        # shares only where something enforces them, unless the cluster's entry allows more
        assert env["GPUPLACE_ALLOW_UNENFORCED_SHARING"] == ("true" if cluster == "west" else "false")
        assert deployment["spec"]["replicas"] == 2
        entries = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        pod_name = {"fieldRef": {"fieldPath": "metadata.name"}}
        assert entries["GPUPLACE_INSTANCE_ID"]["valueFrom"] == pod_name  # each replica its own election identity
    # the in-cluster watcher elects in the release namespace, where the Role is; the remote one where it was told
    east_env = {e["name"]: e for e in watchers["gp-gpuplace-cluster-watcher-east"]["spec"]["template"]["spec"][
        "containers"][0]["env"]}
    assert east_env["GPUPLACE_LEADER_ELECTION_NAMESPACE"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.namespace"}}
    assert named(objects, "Role", "leader-election")["metadata"]["namespace"] == namespace
    west_env = {e["name"]: e for e in watchers["gp-gpuplace-cluster-watcher-west"]["spec"]["template"]["spec"][
        "containers"][0]["env"]}
    assert west_env["GPUPLACE_LEADER_ELECTION_NAMESPACE"]["value"] == "gpuplace-system"
    west_volumes = watchers["gp-gpuplace-cluster-watcher-west"]["spec"]["template"]["spec"]["volumes"]
    assert {"secretName": "gpuplace-west-kubeconfig", "items": [{"key": "kubeconfig", "path": "kubeconfig"}]} in [
        v.get("secret") for v in west_volumes]

    placement = named(objects, "Deployment", "placement")
    assert placement["spec"]["replicas"] == 3
    container = placement["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert json.loads(env["GPUPLACE_KUBECONFIGS"]["value"]) == {
        "east": "in-cluster", "west": "/etc/gpuplace/clusters/west/kubeconfig"}
    assert env["GPUPLACE_KAFKA_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "gpuplace-kafka",
                                                                            "key": "password"}
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/etc/gpuplace/clusters/west", "/etc/gpuplace/kafka-tls"} <= mounts
    assert "/etc/gpuplace/clusters/east" not in mounts
    assert not [c for c in by_kind(objects, "ConfigMap") if "kubeconfig" in c["metadata"]["name"]]
    settings = named(objects, "ConfigMap", "-settings")["data"]
    assert settings["GPUPLACE_KAFKA_CERT_FILE"] == "/etc/gpuplace/kafka-tls/tls.crt"
    assert settings["GPUPLACE_TELEMETRY_INTERVAL_S"] == "10"


async def test_the_dry_run_refuses_what_the_apiserver_would(kube: client.ApiClient, namespace: str,
                                                            helm: str) -> None:
    """The check above can fail: a misspelt field (strict validation) and an invalid value are refused."""
    deployment = named(render(helm, namespace), "Deployment", "placement")
    misspelt = json.loads(json.dumps(deployment))
    misspelt["spec"]["template"]["spec"]["containers"][0]["comand"] = ["gpuplace"]
    with pytest.raises(AssertionError, match="comand"):
        await dry_run_apply(kube, [misspelt], namespace)
    invalid = json.loads(json.dumps(deployment))
    invalid["spec"]["template"]["spec"]["containers"][0]["ports"][0]["name"] = "HTTP_port"
    with pytest.raises(AssertionError, match="refused"):
        await dry_run_apply(kube, [invalid], namespace)


def test_cluster_role_rules_are_deploy_k8s_rbac_yaml(helm: str) -> None:
    reference = next(d for d in yaml.safe_load_all(RBAC_YAML.read_text()) if d and d["kind"] == "ClusterRole")
    for values in ({}, FULL_VALUES):
        objects = render(helm, "gpuplace", values)
        [role] = by_kind(objects, "ClusterRole")
        assert role["rules"] == reference["rules"]
        [binding] = by_kind(objects, "ClusterRoleBinding")
        [account] = by_kind(objects, "ServiceAccount")
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                        "namespace": "gpuplace"}]
        [lease_role] = by_kind(objects, "Role")
        assert lease_role["metadata"]["namespace"] == "gpuplace"
        assert lease_role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                        "verbs": ["get", "create", "update"]}]


async def test_the_leader_election_role_grants_leases_in_the_release_namespace_only(
        kube: client.ApiClient, namespace: str, helm: str) -> None:
    objects = render(helm, namespace)
    core, rbac, authz = client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube), client.AuthorizationV1Api(kube)
    [account] = by_kind(objects, "ServiceAccount")
    [role] = by_kind(objects, "Role")
    [binding] = by_kind(objects, "RoleBinding")
    await core.create_namespaced_service_account(namespace, account)
    await rbac.create_namespaced_role(namespace, role)
    await rbac.create_namespaced_role_binding(namespace, binding)
    user = f"system:serviceaccount:{namespace}:{account['metadata']['name']}"

    async def allowed(verb: str, in_namespace: str) -> bool:
        review = await authz.create_subject_access_review({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": ["system:serviceaccounts", "system:authenticated"],
                     "resourceAttributes": {"namespace": in_namespace, "verb": verb,
                                            "group": "coordination.k8s.io", "resource": "leases"}}})
        return bool(review.status.allowed)

    await eventually(lambda: allowed("get", namespace), what="the leader-election RoleBinding to take effect")
    other = unique_name("elsewhere")
    answers = {(verb, ns == namespace): await allowed(verb, ns)
               for verb in ("get", "create", "update", "delete", "list", "watch") for ns in (namespace, other)}
    assert {key for key, granted in answers.items() if granted} == {
        ("get", True), ("create", True), ("update", True)}


def test_settings_configmap_holds_known_settings_and_no_secret(helm: str) -> None:
    fields = {f"GPUPLACE_{f.upper()}" for f in Settings.model_fields} | {"GPUPLACE_HTTP_PORT"}
    for values in ({}, FULL_VALUES):
        objects = render(helm, "gpuplace", values)
        data = named(objects, "ConfigMap", "-settings")["data"]
        assert set(data) <= fields, set(data) - fields
        assert not {"GPUPLACE_DATABASE_URL", "GPUPLACE_KAFKA_PASSWORD"} & set(data)
        assert not by_kind(objects, "Secret"), "the chart creates no Secret: it references existing ones"
        for workload in by_kind(objects, "Deployment") + by_kind(objects, "DaemonSet") + by_kind(objects, "Job"):
            spec = workload["spec"]["template"]["spec"]
            for container in spec.get("initContainers", []) + spec["containers"]:
                for entry in container.get("env", []):
                    if entry["name"] in ("GPUPLACE_DATABASE_URL", "GPUPLACE_KAFKA_PASSWORD"):
                        assert "value" not in entry and "secretKeyRef" in entry["valueFrom"], workload


def test_database_url_reaches_only_the_pods_that_use_it(helm: str) -> None:
    objects = render(helm, "gpuplace", FULL_VALUES)

    def env_names(workload: dict) -> set[str]:
        spec = workload["spec"]["template"]["spec"]
        return {e["name"] for c in spec.get("initContainers", []) + spec["containers"] for e in c.get("env", [])}

    with_url = {w["metadata"]["name"] for w in by_kind(objects, "Deployment") + by_kind(objects, "DaemonSet")
                + by_kind(objects, "Job") if "GPUPLACE_DATABASE_URL" in env_names(w)}
    assert with_url == {"gp-gpuplace-placement", "gp-gpuplace-telemetry-ingest", "gp-gpuplace-latency-ingest",
                        "gp-gpuplace-migrate"}


def test_every_service_runs_with_probes_on_the_http_port(helm: str) -> None:
    for values, port in (({}, 8080), (FULL_VALUES, 9090)):
        objects = render(helm, "gpuplace", values)
        assert named(objects, "ConfigMap", "-settings")["data"]["GPUPLACE_HTTP_PORT"] == str(port)
        commands = set()
        for workload in by_kind(objects, "Deployment") + by_kind(objects, "DaemonSet"):
            spec = workload["spec"]["template"]["spec"]
            assert spec["securityContext"]["runAsNonRoot"] is True
            [container] = spec["containers"]
            commands.add(tuple(container["command"]))
            assert container["ports"] == [{"name": "http", "containerPort": port, "protocol": "TCP"}]
            assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
            assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
        expected = {("gpuplace", "service", s) for s in SERVICES if values or s != "gpu-agent"}
        assert commands == expected
        services = by_kind(objects, "Service")
        assert all(s["spec"]["ports"][0]["targetPort"] == "http" for s in services)
        pdbs = {p["metadata"]["name"] for p in by_kind(objects, "PodDisruptionBudget")}
        assert pdbs == {d["metadata"]["name"] for d in by_kind(objects, "Deployment")}


def test_gpu_agent_reaches_the_api_of_its_own_cluster_only_to_scrape_pod_latency(helm: str) -> None:
    # FULL_VALUES: east is the cluster the chart runs in (no kubeconfigSecret), west a remote one
    for scrape in (True, False):
        values = {**FULL_VALUES, "gpuAgent": {"enabled": True, "latencyScrape": scrape}}
        spec = named(render(helm, "gpuplace", values), "DaemonSet", "-gpu-agent")["spec"]["template"]["spec"]
        [container] = spec["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert spec["automountServiceAccountToken"] is scrape
        if scrape:
            assert (env["GPUPLACE_CLUSTER"], env["GPUPLACE_REGION"]) == ("east", "us-east")
            assert env["GPUPLACE_KUBECONFIG"] == "in-cluster"  # its own cluster, through its rotated token
            assert not [m for m in container["volumeMounts"] if m["mountPath"].startswith("/etc/gpuplace/clusters")]
        else:
            assert env["GPUPLACE_LATENCY_WINDOW_S"] == "0" and "GPUPLACE_KUBECONFIG" not in env


def test_the_migration_job_is_a_pre_install_and_pre_upgrade_hook(helm: str) -> None:
    [job] = by_kind(render(helm, "gpuplace"), "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    spec = job["spec"]["template"]["spec"]
    assert [c["command"][:2] for c in spec["initContainers"] + spec["containers"]] == [
        ["gpuplace", "migrate"], ["gpuplace", "topics"]]
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    topics_command = spec["containers"][0]["command"]
    # the default fits the Kafka it is pointed at (0: its brokers, at most 3): a one-broker Kafka passes the hook
    assert topics_command[topics_command.index("--replication-factor") + 1] == "0"


def test_helm_lints_the_chart_and_refuses_a_misspelt_value_by_its_schema(helm: str) -> None:
    lint = subprocess.run([helm, "lint", str(CHART)], capture_output=True, text=True, timeout=120)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    for misspelt, said in ((["--set", "placement.replica=3"], "additional properties 'replica' not allowed"),
                           (["--set", "kafka.securityProtocol=SASL"], "kafka/securityProtocol")):
        result = subprocess.run([helm, "template", "gp", str(CHART), *misspelt], capture_output=True, text=True,
                                timeout=120)
        assert result.returncode != 0 and "schema" in result.stderr and said in result.stderr, result.stderr


def test_kafka_is_sasl_ssl_by_default_with_the_password_from_a_secret(helm: str) -> None:
    """Issue 40: the chart defaulted to PLAINTEXT, which lets anyone who reaches the broker write any topic. By
    default every pod that talks to Kafka logs in over TLS, its password from the Secret gpuplace-kafka; a SASL
    protocol without a user or a Secret is refused when rendering, naming the value to set."""
    objects = render(helm, "gpuplace", {})
    data = named(objects, "ConfigMap", "-settings")["data"]
    assert (data["GPUPLACE_KAFKA_SECURITY_PROTOCOL"], data["GPUPLACE_KAFKA_USERNAME"]) == ("SASL_SSL", "gpuplace")
    workloads = by_kind(objects, "Deployment") + by_kind(objects, "DaemonSet") + by_kind(objects, "Job")
    for workload in workloads:
        containers = workload["spec"]["template"]["spec"]["containers"]
        passwords = [e["valueFrom"]["secretKeyRef"] for c in containers for e in c.get("env", [])
                     if e["name"] == "GPUPLACE_KAFKA_PASSWORD"]
        assert passwords == [{"name": "gpuplace-kafka", "key": "password"}], workload["metadata"]["name"]
    for unset, named_value in (("kafka.sasl.existingSecret=", "kafka.sasl.existingSecret"),
                               ("kafka.sasl.username=", "kafka.sasl.username")):
        result = subprocess.run([helm, "template", "gp", str(CHART), "--set", unset], capture_output=True,
                                text=True, timeout=120)
        assert result.returncode != 0 and named_value in result.stderr, result.stderr


def test_with_users_per_service_each_service_logs_in_as_itself(helm: str) -> None:
    """The broker's ACLs can hold a service to its own topics only if each logs in as its own user: with
    kafka.sasl.usersPerService every workload is its service's user, password under that key of the Secret; the
    hook Job (it creates every topic) stays kafka.sasl.username."""
    objects = render(helm, "gpuplace", {"kafka": {"sasl": {"usersPerService": True}}, "gpuAgent": {"enabled": True}})
    found = {}
    for workload in by_kind(objects, "Deployment") + by_kind(objects, "DaemonSet") + by_kind(objects, "Job"):
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e for e in container.get("env", [])}
        user = env["GPUPLACE_KAFKA_USERNAME"]["value"] if "GPUPLACE_KAFKA_USERNAME" in env else None
        found[container["name"]] = (user, env["GPUPLACE_KAFKA_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"])
    services = ("cluster-watcher", "placement", "telemetry-ingest", "latency-ingest", "gpu-agent")
    assert {name: found[name] for name in services} == {name: (name, name) for name in services}
    assert [v for k, v in found.items() if k not in services] == [("gpuplace", "password")]  # the hook: `username`


def test_the_grafana_dashboard_charts_every_metric(helm: str) -> None:
    dashboard = named(render(helm, "gpuplace"), "ConfigMap", "-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    document = json.loads(dashboard["data"]["gpuplace.json"])
    expressions = " ".join(t["expr"] for p in document["panels"] for t in p.get("targets", []))
    assert [m for m in METRICS if m not in expressions] == []



ALERTS = {"GpuplaceNothingPlacedWhilePodsWait", "GpuplaceConsumerLag", "GpuplaceDeadLetters", "GpuplaceOutboxBacklog",
          "GpuplaceTargetDown", "GpuplaceNotReady"}
OTHERS_METRICS = {"up", "kube_pod_status_ready"}  # Prometheus's own; kube-state-metrics'


def test_the_alerts_read_only_metrics_that_exist_and_select_this_release(helm: str) -> None:
    import re

    rule = named(render(helm, "gpuplace", {"prometheusRule": {"enabled": True}}), "PrometheusRule", "gpuplace")
    rules = rule["spec"]["groups"][0]["rules"]
    assert {r["alert"] for r in rules} == ALERTS
    for alert in rules:
        expr = alert["expr"]
        names = set(re.findall(r"\b([a-z_]+)\{", expr))
        assert names and names <= set(METRICS) | OTHERS_METRICS, (alert["alert"], names)
        assert 'namespace="gpuplace"' in expr and "gp-gpuplace-.*" in expr  # this release's targets only
        assert alert["labels"]["severity"] in ("warning", "critical") and alert["annotations"]["summary"]
        assert "{{ $labels" in alert["annotations"]["summary"] or "{{ $value" in alert["annotations"]["summary"]
    without_ksm = named(render(helm, "gpuplace", {"prometheusRule": {"enabled": True, "kubeStateMetrics": False}}),
                        "PrometheusRule", "gpuplace")
    assert {r["alert"] for r in without_ksm["spec"]["groups"][0]["rules"]} == ALERTS - {"GpuplaceNotReady"}
    assert not by_kind(render(helm, "gpuplace"), "PrometheusRule")  # off by default: it needs the operator's CRD


async def test_a_misspelt_alert_field_is_refused_by_the_prometheus_rule_schema(
        kube: client.ApiClient, namespace: str, helm: str, service_monitor_crd: None) -> None:
    """The dry run above can fail on a rule: the PrometheusRule kind is served with the operator's strict schema."""
    rule = named(render(helm, namespace, {"prometheusRule": {"enabled": True}}), "PrometheusRule", "gpuplace")
    rule["spec"]["groups"][0]["rules"][0]["fro"] = "10m"
    with pytest.raises(AssertionError, match="fro"):
        await dry_run_apply(kube, [rule], namespace)
