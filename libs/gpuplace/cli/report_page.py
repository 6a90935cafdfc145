"""The fleet report as one self-contained HTML page: tables, and matplotlib plots embedded as PNG data URIs.

No script, stylesheet, font or image is fetched: the page is read as it is, offline, in a mail attachment or a
CI artifact, and without JavaScript. Every figure of the page is in `FleetReport.as_json()` too (`--json`).
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from gpuplace.usecases.fleet_report import ClusterFigures, FleetReport, Totals

_MIB_PER_GIB = 1024.0
PLOTTED = 40  # bars a plot shows at most (the largest clusters, by GPU memory): a page stays readable
_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em;color:#222;max-width:1300px}
h1{font-size:1.6em;margin-bottom:.2em} h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em} th,td{padding:.25em .7em;border:1px solid #ddd}
th{background:#f3f3f3;text-align:left} td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.total td{font-weight:600;background:#fafafa} .muted{color:#777} img{max-width:100%;border:1px solid #eee}
.bad{color:#b00020;font-weight:600}
"""


def render(report: FleetReport, *, generated_at: datetime | None = None) -> str:
    """The page for `report`."""
    at = (generated_at or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M:%S UTC")
    fleet, regions = report.fleet(), report.regions()
    clusters = sorted(report.clusters, key=lambda c: (c.region, c.cluster))
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        "<title>gpuplace fleet report</title>", f"<style>{_STYLE}</style></head><body>",
        "<h1>gpuplace fleet report</h1>",
        f'<p class="muted">source: {_e(report.source)} &middot; generated {at} &middot; {fleet.clusters} '
        f"cluster(s) in {len(regions)} region(s)</p>",
    ]
    parts += [f'<p class="muted">note: {_e(note)}</p>' for note in report.notes]
    parts += ["<h2>Regions</h2>", _totals_table(regions, fleet)]
    parts += ["<h2>Clusters</h2>", _clusters_table(clusters)]
    plotted = sorted(sorted(clusters, key=lambda c: -c.gpu_memory_mib)[:PLOTTED], key=lambda c: (c.region, c.cluster))
    if len(plotted) < len(clusters):
        parts.append(f'<p class="muted">plots show the {len(plotted)} clusters with the most GPU memory of '
                     f"{len(clusters)}; the tables show all</p>")
    if plotted and fleet.gpu_memory_mib > 0:
        parts.append(_img(_memory_plot(plotted), "GPU memory per cluster: allocated, stranded, free and usable"))
    parts += ["<h2>Latency per workload</h2>", _latency_section(clusters, plotted)]
    parts += ["<h2>Pods waiting, and why</h2>", _waiting_section(clusters, plotted, report)]
    if report.series:
        parts += ["<h2>Over time</h2>", _img(_series_plot(report), "GPU memory stranded and allocated over time")]
    parts.append("<p class=\"muted\">Stranded: free GPU memory the cluster's typical workload (the shapes of its "
                 "pods, placed and waiting) could not use (DESIGN §6). SLO attainment: frames within their deadline. "
                 "p95: the 95th percentile of the latency windows' p95.</p></body></html>")
    return "\n".join(parts)


# -- tables ------------------------------------------------------------------------------------------------
def _totals_table(regions: Sequence[Totals], fleet: Totals) -> str:
    head = ["region", "clusters", "nodes", "GPUs", "GPUs in use", "GPUs closed", "GPU memory (GiB)",
            "allocated", "stranded", "pods placed", "pods waiting", "SLO attainment"]
    rows = [_totals_cells(t) for t in regions]
    return _table(head, rows, total=_totals_cells(fleet))


def _totals_cells(t: Totals) -> list[str]:
    return [_e(t.name), _n(t.clusters), _n(t.nodes), _n(t.gpus), _n(t.gpus_in_use), _n(t.gpus_closed),
            _gib(t.gpu_memory_mib), _gib_pct(t.gpu_memory_allocated_mib, t.allocated_pct),
            _gib_pct(t.gpu_memory_stranded_mib, t.stranded_pct), _n(t.pods_placed), _n(t.pods_waiting),
            _ratio(t.slo_attainment)]


def _clusters_table(clusters: Sequence[ClusterFigures]) -> str:
    head = ["region", "cluster", "nodes", "GPUs", "GPUs in use", "GPUs closed", "GPU memory (GiB)", "allocated",
            "stranded", "pods placed", "pods waiting", "SLO attainment"]
    rows = []
    for c in clusters:
        t = Totals(c.cluster)
        t.add(c)
        rows.append([_e(c.region), *_totals_cells(t)[:1], *_totals_cells(t)[2:]])
    return _table(head, rows) if rows else '<p class="muted">no cluster</p>'


def _latency_section(clusters: Sequence[ClusterFigures], plotted: Sequence[ClusterFigures]) -> str:
    head = ["region", "cluster", "workload", "windows", "frames", "deadline misses", "SLO attainment",
            "p95 (ms)", "worst window p95 (ms)", "deadline (ms)"]
    rows = []
    for c in clusters:
        for w in c.latency:
            late = w.deadline_ms is not None and w.p95_ms > w.deadline_ms
            rows.append([_e(c.region), _e(c.cluster), _e(w.workload), _n(w.windows), _n(w.frames),
                         _n(w.deadline_misses), _ratio(w.slo_attainment),
                         _num(w.p95_ms, cls="n bad" if late else "n"), _num(w.worst_p95_ms), _num(w.deadline_ms)])
    if not rows:
        return '<p class="muted">no latency window recorded</p>'
    shown = [c for c in plotted if c.latency]
    return _table(head, rows) + (_img(_latency_plot(shown), "p95 per workload and cluster against its deadline")
                                 if shown else "")


def _waiting_section(clusters: Sequence[ClusterFigures], plotted: Sequence[ClusterFigures],
                     report: FleetReport) -> str:
    reasons = [why for why, _ in report.waiting_reasons().most_common()]
    if not reasons:
        return '<p class="muted">no pod waits</p>'
    head = ["region", "cluster", *reasons, "total"]
    rows = [[_e(c.region), _e(c.cluster), *(_n(c.pods_waiting.get(why, 0)) for why in reasons), _n(c.waiting)]
            for c in clusters if c.waiting]
    shown = [c for c in plotted if c.waiting]
    return _table(head, rows) + (_img(_waiting_plot(shown, reasons), "pods waiting per cluster, by why")
                                 if shown else "")


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], total: Sequence[str] | None = None) -> str:
    out = ["<table><thead><tr>", *(f"<th>{_e(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for row in rows:
        out.append("<tr>" + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in row) + "</tr>")
    if total is not None:
        out.append('<tr class="total">' + "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in total)
                   + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _e(text: object) -> str:
    return html.escape(str(text))


def _n(value: int) -> str:
    return f'<td class="n">{value:,}</td>'


def _num(value: float | None, cls: str = "n") -> str:
    return f'<td class="{cls}">{"n/a" if value is None else f"{value:,.1f}"}</td>'


def _gib(mib: float | None) -> str:
    return _num(None if mib is None else mib / _MIB_PER_GIB)


def _gib_pct(mib: float | None, pct: float | None) -> str:
    if mib is None:
        return '<td class="n muted">n/a</td>'
    return f'<td class="n">{mib / _MIB_PER_GIB:,.1f} ({"n/a" if pct is None else f"{pct:.1f} %"})</td>'


def _ratio(value: float | None) -> str:
    return '<td class="n muted">n/a</td>' if value is None else f'<td class="n">{100 * value:.2f} %</td>'


# -- plots -------------------------------------------------------------------------------------------------
def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _img(png: bytes, alt: str) -> str:
    return f'<p><img alt="{_e(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}"></p>'


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    _pyplot().close(fig)
    return buffer.getvalue()


def _label(c: ClusterFigures) -> str:
    return f"{c.region}/{c.cluster}"


def _memory_plot(clusters: Sequence[ClusterFigures]) -> bytes:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(11, 0.5 * len(clusters) + 1.6))
    labels = [_label(c) for c in clusters]
    allocated = [c.gpu_memory_allocated_mib / _MIB_PER_GIB for c in clusters]
    stranded = [(c.gpu_memory_stranded_mib or 0.0) / _MIB_PER_GIB for c in clusters]
    usable = [max(0.0, (c.gpu_memory_mib - c.gpu_memory_allocated_mib) / _MIB_PER_GIB - s)
              for c, s in zip(clusters, stranded, strict=True)]
    ax.barh(labels, allocated, color="#4c72b0", label="allocated")
    ax.barh(labels, stranded, left=allocated, color="#c44e52", label="stranded (free, unusable)")
    ax.barh(labels, usable, left=[a + s for a, s in zip(allocated, stranded, strict=True)], color="#bbbbbb",
            label="free, usable")
    ax.invert_yaxis()
    ax.set_xlabel("GPU memory (GiB)")
    ax.set_title("GPU memory per cluster")
    ax.legend(loc="lower right", fontsize="small")
    return _png(fig)


def _latency_plot(clusters: Sequence[ClusterFigures]) -> bytes:
    plt = _pyplot()
    bars = [(f"{_label(c)}\n{w.workload}", w) for c in clusters for w in c.latency][:PLOTTED]
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(bars) + 1.6))
    labels = [label for label, _ in bars]
    ax.barh(labels, [w.p95_ms for _, w in bars], color=["#c44e52" if w.deadline_ms is not None and
                                                         w.p95_ms > w.deadline_ms else "#55a868" for _, w in bars])
    for y, (_, w) in enumerate(bars):
        if w.deadline_ms is not None:
            ax.plot([w.deadline_ms, w.deadline_ms], [y - 0.4, y + 0.4], color="black", linewidth=2)
    ax.invert_yaxis()
    ax.set_xlabel("p95 latency (ms); black tick: deadline")
    ax.set_title("p95 per workload (red: past its deadline)")
    return _png(fig)


def _waiting_plot(clusters: Sequence[ClusterFigures], reasons: Sequence[str]) -> bytes:
    plt = _pyplot()
    shown = [c for c in clusters if c.waiting]
    fig, ax = plt.subplots(figsize=(11, 0.5 * len(shown) + 1.8))
    labels = [_label(c) for c in shown]
    left = [0.0] * len(shown)
    for why in reasons:
        counts = [float(c.pods_waiting.get(why, 0)) for c in shown]
        ax.barh(labels, counts, left=left, label=why)
        left = [a + b for a, b in zip(left, counts, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel("pods waiting")
    ax.set_title("Pods waiting, by why")
    ax.legend(loc="lower right", fontsize="small")
    return _png(fig)


def _series_plot(report: FleetReport) -> bytes:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(11, 4))
    for region in sorted({p.region for p in report.series}):
        points = sorted((p for p in report.series if p.region == region), key=lambda p: p.t_s)
        hours = [p.t_s / 3600 for p in points]
        line = ax.plot(hours, [p.gpu_memory_stranded_mib / _MIB_PER_GIB for p in points],
                       label=f"{region} stranded")[0]
        ax.plot(hours, [p.gpu_memory_allocated_mib / _MIB_PER_GIB for p in points], linestyle=":",
                color=line.get_color(), label=f"{region} allocated")
    ax.set_xlabel("hours")
    ax.set_ylabel("GPU memory (GiB)")
    ax.legend(fontsize="small", ncol=2)
    return _png(fig)


__all__ = ["render"]
