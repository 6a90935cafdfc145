"""Whether one cluster's apiserver serves gpuplace now: credentials accepted, every watch listed and streaming.

A watch that fails with an HTTP status keeps failing the same way until someone acts, and each status means
something different to the operator (ACCESS_FAILURES): 401, the credentials were rejected (a token expired or
revoked, a certificate not trusted); 403, the identity's RBAC lacks a verb; 404, the cluster does not serve that
API. `ApiHealth` records each watch's state as the informer reports it (informer.list_and_watch), counts each
failure by that meaning (a metric), and answers the readiness check (services/telemetry.Health) with the
cluster and the cause: a watch that keeps retrying on 401 is alive, but no longer useful.

An open watch stream is not re-authenticated: a revoked token is noticed by the next request, which may be minutes
away. So the check also makes one cheap authenticated request (`GET /version`, which every identity may read):
a 401 there is seen within one probe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplace.adapters.kube.cluster_api import KubeClusterApi

log = logging.getLogger(__name__)

FailureReason = Literal["unauthorized", "forbidden", "not_served", "error", "unreachable"]
"""A failed API call, as the metric counts it (a closed vocabulary)."""
ACCESS_FAILURES: dict[int, tuple[FailureReason, str]] = {
    401: ("unauthorized", "credentials rejected (401): the token expired or was revoked, or the client "
                          "certificate is not trusted"),
    403: ("forbidden", "forbidden (403): the identity's RBAC does not allow it (deploy/k8s/rbac.yaml)"),
    404: ("not_served", "not served (404): this cluster's apiserver does not serve that API"),
}
Report = Callable[[str, str, FailureReason], None]
"""(cluster, what failed: a kind or "credentials", why): counted as gpuplace_kube_api_failures_total."""


class ApiNotReady(RuntimeError):
    """The apiserver of a cluster does not serve gpuplace now; the message names the cluster and the cause."""


def failure_of(exc: BaseException, *, detail: bool = True) -> tuple[FailureReason, str]:
    """What a failed call means: its reason (for the metric) and a sentence for the log and /readyz; with `detail`,
    the apiserver's own words after it (the log's: /readyz keeps to the meaning, one short line)."""
    if isinstance(exc, ApiException):
        reason, meaning = ACCESS_FAILURES.get(exc.status or 0, ("error", ""))
        said = (exc.reason or "").strip().splitlines()[0][:160] if exc.reason else ""
        if meaning:
            return reason, meaning + (f" ({said})" if detail and said and said not in meaning else "")
        return reason, f"HTTP {exc.status}" + (f": {said}" if said else "")
    return "unreachable", f"unreachable ({type(exc).__name__}: {str(exc)[:160] or 'no detail'})"


@dataclass
class _Watch:
    state: Literal["listing", "streaming", "failed"]
    cause: str = ""


class ApiHealth:
    """One cluster's watches, as list_and_watch reports them, and the readiness check built on them."""

    def __init__(self, cluster: str, report: Report | None = None) -> None:
        self.cluster = cluster
        self._report = report
        self._watches: dict[str, _Watch] = {}
        self.notes: dict[str, str] = {}  # what /readyz says beside "ok" (an API the cluster does not serve)
        self.served: dict[str, bool] = {}  # optional API ("resource.k8s.io/v1") -> served, as discovery last found

    # -- what the informer reports --------------------------------------------------------------------------------
    def listing(self, kind: str) -> None:
        self._watches.setdefault(kind, _Watch("listing"))

    def streaming(self, kind: str) -> None:
        """The watch's list arrived (or its watch opened after a failure): it delivers again."""
        watch = self._watches.get(kind)
        if watch is not None and watch.state == "failed":
            log.info("cluster %s: %s watch streams again", self.cluster, kind)
        self._watches[kind] = _Watch("streaming")

    def failed(self, kind: str, exc: BaseException) -> str:
        """Record a failed list or watch; returns the sentence saying what it means (for the caller's log)."""
        reason, meaning = failure_of(exc)
        self._watches[kind] = _Watch("failed", failure_of(exc, detail=False)[1])
        if self._report is not None:
            self._report(self.cluster, kind, reason)
        return meaning

    def ended(self, kind: str) -> None:
        """The watch stopped on purpose (a term of leadership over, the service stopping): nothing to wait for."""
        self._watches.pop(kind, None)

    def forget_watches(self) -> None:
        """The watches stopped together (a term of leadership over): a standby waits for none of them."""
        self._watches.clear()

    # -- readiness ------------------------------------------------------------------------------------------------
    def problems(self) -> list[str]:
        """The watches that do not deliver now, grouped by why; [] when all do (or none runs: a standby)."""
        causes: dict[str, list[str]] = {}
        for kind, w in sorted(self._watches.items()):
            if w.state != "streaming":
                causes.setdefault("not listed yet" if w.state == "listing" else "failing: " + w.cause, []).append(kind)
        return [f"{', '.join(kinds)} watch{'es' if len(kinds) > 1 else ''} {cause}" for cause, kinds in causes.items()]

    async def check(self, api: KubeClusterApi) -> None:
        """Readiness: the credentials are accepted now, and every watch lists and streams; ApiNotReady otherwise."""
        try:
            await api.version()
        except (ApiException, OSError, aiohttp.ClientError) as exc:
            reason, meaning = failure_of(exc, detail=False)
            if self._report is not None:
                self._report(self.cluster, "credentials", reason)
            raise ApiNotReady(f"apiserver of cluster {self.cluster}: {meaning}") from None
        if problems := self.problems():
            raise ApiNotReady(f"apiserver of cluster {self.cluster}: {'; '.join(problems)}")


__all__ = ["ACCESS_FAILURES", "ApiHealth", "ApiNotReady", "FailureReason", "Report", "failure_of"]
