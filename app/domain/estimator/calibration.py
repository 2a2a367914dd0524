"""Calibration: fit the estimator's efficiency and runtime-memory figures from measured benchmark runs.

Pure (stdlib + pydantic). The services layer turns stored runs into :class:`CalibrationRun` objects,
:func:`fit_calibrations` fits one :class:`AcceleratorFit` per accelerator, and :func:`apply_calibration`
returns a :class:`~app.domain.cluster.Cluster` whose figures are replaced by the calibrated ones — each with
the provenance ``calibrated (run N, YYYY-MM-DD)`` — so the unchanged :func:`~app.domain.estimate.estimate`
uses them and lists them in its assumptions. Calibration is explicit: a caller that does not apply it gets
the catalog defaults.

What is fitted, per accelerator (the latest run that carries each kind of evidence wins):

* **GEMM time vs size** — the estimator's own form ``t = F/(peak·e) + overhead`` is fitted by least squares
  over the runner's GEMM sweep (``gemm:bf16:MxNxK`` TFLOP/s points, F = 2·M·N·K): the slope gives the
  kernel-level efficiency ``e``, the intercept the fixed ``gemm_overhead_us``.
* **End-to-end step** — ``r = median(predicted / measured step_time_s)`` over ranks of a training-step run;
  ``gemm_efficiency`` and ``attention_efficiency`` are the catalog defaults × r (capped at 1). The catalog's
  GEMM efficiency means "what training GEMMs sustain" (below cuBLAS-alone), so a measured training step is
  preferred to the GEMM sweep for it; without a step the sweep's ``e`` is used.
* **Collectives vs message size** — nccl-tests bus bandwidth (``busbw:<op>:<ranks>r<nodes>n:<bytes>``):
  the efficiency is the asymptotic busbw (1/slope of ``t = bus bytes/B + latency`` over the
  largest group's points) over the link's peak (scale-up per GPU one direction inside a node; the NIC share across nodes), and the
  per-hop latency is the intercept of ``t = a·S + b`` over the all-reduce points divided by the ring steps.
* **Memory outside tensors** — fragmentation = median (peak reserved − peak allocated) / peak allocated;
  the CUDA context as measured before the first collective; NCCL buffers per communicator =
  (outside tensors − context) / communicators (GPU runs with more than one rank).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from app.domain.estimator.cluster import Cluster
from app.domain.estimator.estimate import Assumption
from app.domain.provenance import Confidence, FigureProvenance, Frozen

GEMM_RE = re.compile(r"^gemm:(?P<dtype>[a-z0-9]+):(?P<m>\d+)x(?P<n>\d+)x(?P<k>\d+)$")
BUSBW_RE = re.compile(r"^busbw:(?P<op>[a-z_]+):(?P<ranks>\d+)r(?P<nodes>\d+)n:(?P<size>\d+)$")
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter")
LARGE_MESSAGE_BYTES = 64 * 2**20
MIN_EFFICIENCY = 0.01


def gemm_metric(dtype: str, m: int, n: int, k: int) -> str:
    return f"gemm:{dtype}:{m}x{n}x{k}"


def busbw_metric(op: str, ranks: int, nodes: int, size_bytes: int) -> str:
    return f"busbw:{op}:{ranks}r{nodes}n:{size_bytes}"


def bus_factor(op: str, ranks: int) -> float:
    """nccl-tests: busbw = algbw × 2(n−1)/n (all-reduce) or (n−1)/n (all-gather, reduce-scatter)."""
    frac = (ranks - 1) / ranks
    return 2 * frac if op == "all_reduce" else frac


@dataclass(frozen=True, slots=True)
class Sample:
    metric: str
    unit: str
    rank: int
    measured: float
    predicted: float | None


class CalibrationRun(Frozen):
    """One stored benchmark run, as calibration needs it."""

    run_id: int
    measured_at: str  # YYYY-MM-DD
    timestamp: str = ""  # ISO 8601 with time: orders runs of the same day (the newest evidence wins)
    accelerator: str
    world_size: int = 1
    nodes: int = 1
    scale_out_kind: str | None = None
    communicators: int = 0
    samples: tuple[Sample, ...]
    basis: dict[str, float] = {}  # catalog efficiencies the run's predictions used (config.prediction_basis)
    label: str = ""  # "run 12" (stored), "shipped 2026-12-h200/…" (data/calibration) or "file r.json"
    href: str | None = None  # the run's page

    @property
    def name(self) -> str:
        return self.label or f"run {self.run_id}"

    def values(self, metric: str) -> list[Sample]:
        return [s for s in self.samples if s.metric == metric]


class FittedFigure(Frozen):
    """A figure fitted from run(s): absolute (``value``) or relative to the catalog default (``ratio``)."""

    value: float | None = None
    ratio: float | None = None
    run_id: int
    measured_at: str
    method: str
    run_label: str = ""
    run_href: str | None = None
    basis: dict[str, float] = {}  # for a ratio: the figures it multiplies (those the predictions used)


class GemmFit(Frozen):
    seconds_per_flop: float
    overhead_s: float
    points: int


class AcceleratorFit(Frozen):
    """Everything fitted for one accelerator. Each entry names the run it came from."""

    accelerator: str
    step_ratio: FittedFigure | None = None
    gemm: tuple[GemmFit, FittedFigure] | None = None
    scale_up_busbw_gb_per_s: FittedFigure | None = None
    scale_up_hop_s: FittedFigure | None = None
    scale_out_busbw_gb_per_s: FittedFigure | None = None
    scale_out_hop_s: FittedFigure | None = None
    scale_out_kind: str | None = None
    fragmentation: FittedFigure | None = None
    cuda_context_bytes: FittedFigure | None = None
    nccl_bytes_per_communicator: FittedFigure | None = None

    def figures(self) -> list[FittedFigure]:
        figs = [
            self.step_ratio, self.gemm[1] if self.gemm else None, self.scale_up_busbw_gb_per_s,
            self.scale_up_hop_s, self.scale_out_busbw_gb_per_s, self.scale_out_hop_s, self.fragmentation,
            self.cuda_context_bytes, self.nccl_bytes_per_communicator,
        ]  # fmt: skip
        return [f for f in figs if f is not None]

    def run_ids(self) -> tuple[int, ...]:
        return tuple(sorted({f.run_id for f in self.figures()}))

    def run_labels(self) -> tuple[str, ...]:
        return tuple(sorted({f.run_label or f"run {f.run_id}" for f in self.figures()}))

    def latest_date(self) -> str:
        figs = [self.step_ratio, self.gemm[1] if self.gemm else None, self.fragmentation]
        dates = [f.measured_at for f in figs if f is not None]
        return max(dates) if dates else ""

    @property
    def empty(self) -> bool:
        return not self.figures()


class Calibrations(Frozen):
    """Fits by accelerator slug."""

    fits: dict[str, AcceleratorFit] = {}

    def for_accelerator(self, slug: str) -> AcceleratorFit | None:
        fit = self.fits.get(slug)
        return None if fit is None or fit.empty else fit


def provenance_label(run: str, measured_at: str) -> str:
    """``calibrated (run 12, 2026-12-02)``; ``run`` is the run's label (``run N`` or ``shipped …``)."""
    return f"calibrated ({run}, {measured_at})"


# -- fitting ---------------------------------------------------------------------------------------------


def _median(values: Iterable[float]) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(vals) if vals else None


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``y = a·x + b``; with one distinct x the line goes through the origin."""
    n = len(xs)
    if n == 0:
        raise ValueError("no points to fit")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return my / mx if mx else 0.0, 0.0
    a = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return a, my - a * mx


def fit_gemm(samples: Iterable[Sample], dtype: str = "bf16") -> GemmFit | None:
    """``t = F·seconds_per_flop + overhead`` over the GEMM sweep (rank 0's points; the overhead ≥ 0)."""
    xs: list[float] = []
    ys: list[float] = []
    for s in samples:
        m = GEMM_RE.match(s.metric)
        if not m or m["dtype"] != dtype or s.rank != 0 or s.measured <= 0:
            continue
        flops = 2.0 * int(m["m"]) * int(m["n"]) * int(m["k"])
        xs.append(flops)
        ys.append(flops / (s.measured * 1e12))
    if not xs:
        return None
    a, b = linear_fit(xs, ys)
    if a <= 0:  # noisy sweep: fall back to the largest GEMM's rate through the origin
        i = max(range(len(xs)), key=lambda j: xs[j])
        a, b = ys[i] / xs[i], 0.0
    if b < 0:
        a, b = sum(ys) / sum(xs), 0.0
    return GemmFit(seconds_per_flop=a, overhead_s=b, points=len(xs))


def _collective_points(
    samples: Iterable[Sample], *, cross_node: bool
) -> list[tuple[str, int, int, int, float]]:
    out = []
    for s in samples:
        m = BUSBW_RE.match(s.metric)
        if not m or s.rank != 0 or s.measured <= 0:
            continue
        ranks, nodes = int(m["ranks"]), int(m["nodes"])
        if ranks < 2 or (nodes > 1) != cross_node:
            continue
        out.append((m["op"], ranks, nodes, int(m["size"]), s.measured))
    return out


def _large_busbw(points: list[tuple[str, int, int, int, float]]) -> float | None:
    """Asymptotic bus bandwidth: 1 / slope of t = (bus bytes)/B + latency over the points of the largest
    group (bus bytes = factor·S), else the median busbw of the largest messages."""
    if not points:
        return None
    ranks = max(p[1] for p in points)
    pts = [p for p in points if p[1] == ranks]
    xs = [bus_factor(p[0], p[1]) * p[3] for p in pts]
    ys = [x / (p[4] * 1e9) for x, p in zip(xs, pts, strict=True)]
    if len(set(xs)) >= 2:
        a, _ = linear_fit(xs, ys)
        if a > 0:
            return 1.0 / a / 1e9
    largest = max(p[3] for p in pts)
    cut = min(LARGE_MESSAGE_BYTES, largest)
    return _median(p[4] for p in pts if p[3] >= cut)


def _hop_latency(points: list[tuple[str, int, int, int, float]]) -> float | None:
    """Intercept of t = a·S + b over all-reduce points (t from busbw), per ring step / tree level."""
    ar = [p for p in points if p[0] == "all_reduce"]
    if len({p[3] for p in ar}) < 2:
        return None
    xs = [float(p[3]) for p in ar]
    ys = [bus_factor("all_reduce", p[1]) * p[3] / (p[4] * 1e9) for p in ar]
    _, b = linear_fit(xs, ys)
    ranks, nodes = ar[0][1], ar[0][2]
    per_domain = max(1, ranks // nodes)
    steps = 2 * ((per_domain - 1) + (math.ceil(math.log2(nodes)) if nodes > 1 else 0))
    return max(b, 0.0) / steps if steps else None


def fit_run(run: CalibrationRun) -> AcceleratorFit:
    """What one run tells about its accelerator."""

    def fig(value: float | None = None, ratio: float | None = None, method: str = "") -> FittedFigure:
        return FittedFigure(
            value=value, ratio=ratio, run_id=run.run_id, measured_at=run.measured_at, method=method,
            run_label=run.name, run_href=run.href,
        )  # fmt: skip

    step = [s for s in run.values("step_time_s") if s.predicted and s.measured > 0]
    step_ratio = _median(s.predicted / s.measured for s in step)  # type: ignore[operator]
    gemm = fit_gemm(run.samples)
    intra = _collective_points(run.samples, cross_node=False)
    inter = _collective_points(run.samples, cross_node=True)
    up_bw, up_hop = _large_busbw(intra), _hop_latency(intra)
    out_bw, out_hop = _large_busbw(inter), _hop_latency(inter)
    alloc = {s.rank: s.measured for s in run.values("peak_allocated_bytes") if s.measured > 0}
    reserved = {s.rank: s.measured for s in run.values("peak_reserved_bytes")}
    frag = _median((reserved[r] - a) / a for r, a in alloc.items() if r in reserved and reserved[r] >= a)
    context = _median(s.measured for s in run.values("cuda_context_bytes"))
    outside = _median(s.measured for s in run.values("outside_tensors_bytes"))
    nccl = None
    if context is not None and outside is not None and run.communicators > 0:
        nccl = max(0.0, outside - context) / run.communicators
    return AcceleratorFit(
        accelerator=run.accelerator,
        step_ratio=fig(ratio=step_ratio, method=f"median predicted/measured step time over {len(step)} rank(s)")
        .model_copy(update={"basis": dict(run.basis)}) if step_ratio else None,
        gemm=(gemm, fig(method=f"least squares t = F/(peak·e) + overhead over {gemm.points} GEMMs"))
        if gemm else None,
        scale_up_busbw_gb_per_s=fig(value=up_bw, method="asymptotic busbw of the intra-node sweep")
        if up_bw else None,
        scale_up_hop_s=fig(value=up_hop, method="all-reduce intercept per ring step") if up_hop is not None else None,
        scale_out_busbw_gb_per_s=fig(value=out_bw, method="asymptotic busbw of the cross-node sweep")
        if out_bw else None,
        scale_out_hop_s=fig(value=out_hop, method="all-reduce intercept per step") if out_hop is not None else None,
        scale_out_kind=run.scale_out_kind,
        fragmentation=fig(value=frag, method="median (peak reserved − peak allocated) / peak allocated")
        if frag is not None else None,
        cuda_context_bytes=fig(value=context, method="device memory in use outside the allocator at start")
        if context is not None else None,
        nccl_bytes_per_communicator=fig(
            value=nccl, method=f"(outside tensors − CUDA context) / {run.communicators} communicators"
        ) if nccl is not None else None,
    )  # fmt: skip


def merge_fits(older: AcceleratorFit, newer: AcceleratorFit) -> AcceleratorFit:
    """Each figure from the newer fit when it has one, else the older."""
    data = older.model_dump()
    for name, value in newer.model_dump().items():
        if value is not None:
            data[name] = value
    return AcceleratorFit.model_validate(data)


def fit_calibrations(runs: Iterable[CalibrationRun]) -> Calibrations:
    """One fit per accelerator from every run on it, oldest first (the newest evidence wins per figure)."""
    fits: dict[str, AcceleratorFit] = {}
    for run in sorted(runs, key=lambda r: (r.measured_at, r.timestamp, r.run_id)):
        fit = fit_run(run)
        fits[run.accelerator] = merge_fits(fits[run.accelerator], fit) if run.accelerator in fits else fit
    return Calibrations(fits=fits)


# -- applying --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Change:
    part: str  # efficiency | scale_up_network | scale_out_network | runtime
    field: str
    default: float
    value: float
    run_id: int
    measured_at: str
    method: str
    run_label: str = ""
    run_href: str | None = None

    @property
    def run(self) -> str:
        return self.run_label or f"run {self.run_id}"


def _clamp(x: float, lo: float = MIN_EFFICIENCY, hi: float = 1.0) -> float:
    return min(hi, max(lo, x))


def calibration_changes(cluster: Cluster, fit: AcceleratorFit) -> list[Change]:
    """The figures ``fit`` replaces on ``cluster``: (part, field, default, calibrated value, run)."""
    eff, rt = cluster.efficiency, cluster.runtime
    out: list[Change] = []

    def add(part: str, field: str, default: float, value: float, f: FittedFigure, method: str = "") -> None:
        out.append(Change(part, field, default, value, f.run_id, f.measured_at, method or f.method,
                          f.run_label, f.run_href))  # fmt: skip

    if fit.gemm is not None:
        g, f = fit.gemm
        add("efficiency", "gemm_overhead_us", eff.gemm_overhead_us, round(g.overhead_s * 1e6, 3), f)
    if fit.step_ratio is not None and fit.step_ratio.ratio:
        r, basis = fit.step_ratio.ratio, fit.step_ratio.basis
        for field in ("gemm_efficiency", "attention_efficiency"):
            default = getattr(eff, field)
            base = basis.get(
                field, default
            )  # what the run's predictions assumed (today's default if unknown)
            origin = (
                "catalog default" if base == default else f"{base:g} (the figure the run was predicted with)"
            )
            add("efficiency", field, default, _clamp(base * r), fit.step_ratio,
                f"{origin} × {r:.3f} ({fit.step_ratio.method})")  # fmt: skip
    elif fit.gemm is not None:
        g, f = fit.gemm
        peak = cluster.peak_flops_for("bf16")
        add(
            "efficiency", "gemm_efficiency", eff.gemm_efficiency, _clamp(1.0 / (g.seconds_per_flop * peak)), f
        )
    if fit.scale_up_busbw_gb_per_s is not None and cluster.scale_up_gb_per_s > 0:
        f = fit.scale_up_busbw_gb_per_s
        value = _clamp(f.value / cluster.scale_up_gb_per_s)  # type: ignore[operator]
        add("efficiency", "scale_up_efficiency", eff.scale_up_efficiency, value, f,
            f"{f.method}: {f.value:.1f} of {cluster.scale_up_gb_per_s:.0f} GB/s")  # fmt: skip
    if fit.scale_up_hop_s is not None:
        f = fit.scale_up_hop_s
        add("scale_up_network", "hop_latency_us", cluster.scale_up_network.hop_latency_us,
            round(f.value * 1e6, 3), f)  # type: ignore[operator]  # fmt: skip
    same_fabric = fit.scale_out_kind is None or fit.scale_out_kind == cluster.scale_out_fabric.kind
    if same_fabric and fit.scale_out_busbw_gb_per_s is not None and cluster.scale_out_gb_per_s > 0:
        f = fit.scale_out_busbw_gb_per_s
        value = _clamp(f.value / cluster.scale_out_gb_per_s)  # type: ignore[operator]
        add("scale_out_network", "efficiency", cluster.scale_out_network.efficiency, value, f,
            f"{f.method}: {f.value:.1f} of {cluster.scale_out_gb_per_s:.1f} GB/s")  # fmt: skip
    if same_fabric and fit.scale_out_hop_s is not None:
        f = fit.scale_out_hop_s
        add("scale_out_network", "hop_latency_us", cluster.scale_out_network.hop_latency_us,
            round(f.value * 1e6, 3), f)  # type: ignore[operator]  # fmt: skip
    if fit.fragmentation is not None:
        f = fit.fragmentation
        add("runtime", "fragmentation_fraction", rt.fragmentation_fraction, _clamp(f.value, 0.0, 1.0), f)  # type: ignore[arg-type]
    if fit.cuda_context_bytes is not None:
        f = fit.cuda_context_bytes
        add("runtime", "cuda_context_bytes", rt.cuda_context_bytes, int(f.value), f)  # type: ignore[arg-type]
    if fit.nccl_bytes_per_communicator is not None:
        f = fit.nccl_bytes_per_communicator
        add("runtime", "nccl_bytes_per_communicator", rt.nccl_bytes_per_communicator, int(f.value), f)  # type: ignore[arg-type]
    return out


def apply_calibration(cluster: Cluster, calibrations: Calibrations | None) -> tuple[Cluster, list[Change]]:
    """``cluster`` with the calibrated figures of its accelerator (and scale-out fabric kind), each with the
    provenance ``calibrated (run N, date)``; unchanged when there is no calibration for it."""
    fit = calibrations.for_accelerator(cluster.accelerator.slug) if calibrations else None
    if fit is None:
        return cluster, []
    changes = calibration_changes(cluster, fit)
    parts = {
        "efficiency": cluster.efficiency,
        "scale_up_network": cluster.scale_up_network,
        "scale_out_network": cluster.scale_out_network,
        "runtime": cluster.runtime,
    }
    updates: dict[str, dict] = {p: {} for p in parts}
    for c in changes:
        updates[c.part][c.field] = c.value
        prov = FigureProvenance(
            source=provenance_label(c.run, c.measured_at), as_of=c.measured_at[:10],
            confidence=Confidence.medium, note=f"{c.method}; catalog default {c.default:g}",
        )  # fmt: skip
        updates[c.part].setdefault("provenance", dict(parts[c.part].provenance))[c.field] = prov
    new = {p: parts[p].model_copy(update=u) for p, u in updates.items() if u}
    return cluster.model_copy(update=new), changes


def _show(field: str, value: float) -> str:
    return f"{value / 2**30:.2f} GiB" if "bytes" in field else f"{value:g}"


def calibration_assumption(
    accelerator: str, changes: Sequence[Change], *, enabled: bool = True
) -> Assumption:
    """The estimate's statement of whether (and by which runs) it is calibrated."""
    if not enabled:
        return Assumption(
            name="calibration", value="off (catalog defaults)", source="default",
            note="calibration was turned off for this estimate (calibrated=false)",
        )  # fmt: skip
    if not changes:
        return Assumption(
            name="calibration", value="not calibrated (catalog defaults)", source="default",
            note=f"no benchmark run on {accelerator} has been reported; run `capplan bench run` and post it",
        )  # fmt: skip
    runs = sorted({(c.measured_at, c.run) for c in changes})
    label = ", ".join(name for _, name in runs)
    fields = ", ".join(f"{c.field} {_show(c.field, c.default)}→{_show(c.field, c.value)}" for c in changes)
    latest = max(d for d, _ in runs)
    return Assumption(
        name="calibration", value=f"calibrated by {label}", source=provenance_label(label, latest),
        as_of=latest[:10], confidence=Confidence.medium.value, note=fields,
    )  # fmt: skip
