"""Monitoring for the training job, derived from the plan: Prometheus alert rules and a Grafana dashboard whose
thresholds are the estimate's own predictions.

Metric sources:

* the NVIDIA DCGM exporter (``dcgm-exporter``): ``DCGM_FI_DEV_GPU_UTIL`` (percent), ``DCGM_FI_DEV_FB_USED``
  (MiB of framebuffer in use, CUDA context included — what the plan's *total* per-GPU memory predicts),
  ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`` (fraction of cycles the tensor cores are busy);
* the node exporter's InfiniBand / network counters (``node_infiniband_port_data_transmitted_bytes_total``,
  or ``node_network_transmit_bytes_total`` on EFA/RoCE hosts) for scale-out traffic;
* the training job itself, which must export two gauges (e.g. with ``prometheus_client`` on rank 0):
  ``train_tokens_per_second`` (global tokens/s of the last logging interval) and ``train_loss``.

Thresholds (all written into the rules with the predicted value in the annotation):

* tokens/s below ``THROUGHPUT_FRACTION`` of the predicted rate for 15 minutes;
* GPU memory in use above the predicted peak plus ``MEMORY_MARGIN`` for 5 minutes, and above
  ``MEMORY_CRITICAL`` of what the card offers (an out-of-memory error is near);
* GPU utilisation below ``UTILISATION_FLOOR`` percent for 15 minutes;
* scale-out bytes per node below ``NETWORK_FRACTION`` of the expected rate (gradient / parameter traffic of
  the data-parallel dimension and the pipeline transfers, from the plan) for 15 minutes;
* a loss spike (above ``LOSS_SPIKE_FACTOR`` × its 1-hour average) and a NaN loss.
"""

from __future__ import annotations

import json
import re

from app.domain.estimator.plan import Sharding
from app.domain.export.document import PlanDocument
from app.domain.export.launch import plan_hash, unique_name

THROUGHPUT_FRACTION = 0.8
MEMORY_MARGIN = 0.10
MEMORY_CRITICAL = 0.97
UTILISATION_FLOOR = 80
NETWORK_FRACTION = 0.5
LOSS_SPIKE_FACTOR = 1.5
MIB = 2**20


def expected_scale_out_bytes_per_s_per_node(doc: PlanDocument) -> float:
    """Bytes each node sends over the scale-out network per second, from the plan (an estimate).

    Data parallel: FSDP/ZeRO-3 all-gathers the 16-bit parameters twice and reduce-scatters fp32 gradients
    every micro-batch; DDP/ZeRO-1/2/distributed optimizer reduce once per step (all-reduce ≈ 2× the gradient
    bytes). Each rank moves (n−1)/n of the buffer. Pipeline: every micro-batch sends activations forward and
    gradients back (b·s·h·2 B each way) at each stage boundary. 0 on a single node.
    """
    plan, hw = doc.plan, doc.hardware
    if hw.gpus <= hw.gpus_per_node:
        return 0.0
    params_per_rank = doc.estimate.parameters_total / (plan.tp * plan.pp)
    n = max(1, plan.dp * plan.cp)
    share = (n - 1) / n
    if plan.sharding.shards_params:
        per_step = plan.micro_batches * params_per_rank * (2 * 2 + 4) * share
    elif plan.sharding is Sharding.ddp:
        per_step = params_per_rank * 4 * 2 * share
    else:
        per_step = params_per_rank * (4 + 2) * share
    pipeline = 0.0
    if plan.pp > 1:
        act = plan.micro_batch * plan.seq_len / plan.cp * doc.arch.hidden_size * 2
        pipeline = 2 * plan.micro_batches * plan.vpp * act
    per_gpu = (per_step + pipeline) / doc.estimate.step_time_s
    return per_gpu * hw.gpus_per_node


def _network_metric(doc: PlanDocument) -> str:
    if doc.hardware.fabric_kind == "infiniband":
        return "node_infiniband_port_data_transmitted_bytes_total"
    return "node_network_transmit_bytes_total"


def _rule(alert: str, expr: str, duration: str, severity: str, summary: str, description: str) -> list[str]:
    return [
        f"      - alert: {alert}",
        f"        expr: {expr}",
        f"        for: {duration}",
        "        labels:",
        f"          severity: {severity}",
        "        annotations:",
        f"          summary: {json.dumps(summary)}",
        f"          description: {json.dumps(description)}",
    ]


def prometheus_rules(doc: PlanDocument) -> tuple[str, list[str]]:
    """An alerting rule file (``promtool check rules`` passes on it)."""
    est = doc.estimate
    tps_floor = est.tokens_per_s * THROUGHPUT_FRACTION
    peak_mib = est.peak_memory_bytes / MIB
    mem_alarm_mib = peak_mib * (1 + MEMORY_MARGIN)
    usable_mib = est.usable_memory_bytes / MIB
    net = expected_scale_out_bytes_per_s_per_node(doc)
    group = re.sub(r"[^A-Za-z0-9_]", "_", unique_name(doc))
    lines = [
        f"# Alerts for {unique_name(doc)}: thresholds from capplan's estimate ({est.tokens_per_s:,.0f} tokens/s, "
        f"peak {peak_mib / 1024:.1f} GiB per GPU of {usable_mib / 1024:.1f} GiB).",
        "# The training job must export train_tokens_per_second and train_loss; GPU figures come from",
        "# dcgm-exporter, network from node-exporter. Check with: promtool check rules <this file>",
        "groups:",
        f"  - name: capplan_{group}",
        "    rules:",
    ]
    lines += _rule(
        "TrainingThroughputLow",
        f"sum(train_tokens_per_second) < {tps_floor:.0f}",
        "15m", "warning",
        f"tokens/s below {THROUGHPUT_FRACTION:.0%} of the predicted {est.tokens_per_s:,.0f}",
        "Throughput is {{ $value | humanize }} tokens/s; stragglers, a degraded link or a restart loop are the "
        "usual causes.",
    )  # fmt: skip
    lines += _rule(
        "GPUMemoryAboveEstimate",
        f"max(DCGM_FI_DEV_FB_USED) > {mem_alarm_mib:.0f}",
        "5m", "warning",
        f"GPU memory above the predicted peak {peak_mib / 1024:.1f} GiB + {MEMORY_MARGIN:.0%}",
        "A GPU uses {{ $value | humanize }} MiB; the plan predicted at most "
        f"{peak_mib:.0f} MiB. Check fragmentation, a larger batch or a memory leak.",
    )  # fmt: skip
    lines += _rule(
        "GPUMemoryNearCapacity",
        f"max(DCGM_FI_DEV_FB_USED) > {usable_mib * MEMORY_CRITICAL:.0f}",
        "2m", "critical",
        f"GPU memory above {MEMORY_CRITICAL:.0%} of the {usable_mib / 1024:.1f} GiB the card offers",
        "An out-of-memory error is near: {{ $value | humanize }} MiB in use.",
    )  # fmt: skip
    lines += _rule(
        "GPUUtilizationLow",
        f"avg(DCGM_FI_DEV_GPU_UTIL) < {UTILISATION_FLOOR}",
        "15m", "warning",
        f"average GPU utilisation below {UTILISATION_FLOOR}%",
        "GPUs are {{ $value | humanize }}% busy on average: input pipeline, communication or a hung rank.",
    )  # fmt: skip
    if net > 0:
        lines += _rule(
            "ScaleOutBandwidthLow",
            f"min(sum by (instance) (rate({_network_metric(doc)}[5m]))) < {net * NETWORK_FRACTION:.0f}",
            "15m", "warning",
            f"a node sends below {NETWORK_FRACTION:.0%} of the expected {net / 1e9:.2f} GB/s",
            "A node moves {{ $value | humanize }}B/s; the plan expects "
            f"{net / 1e9:.2f} GB/s per node of data-parallel and pipeline traffic.",
        )  # fmt: skip
    lines += _rule(
        "TrainingLossSpike",
        f"train_loss > {LOSS_SPIKE_FACTOR} * avg_over_time(train_loss[1h])",
        "5m", "warning",
        f"loss above {LOSS_SPIKE_FACTOR}× its one-hour average",
        "Loss {{ $value | humanize }}: consider rolling back to the last checkpoint.",
    )  # fmt: skip
    lines += _rule(
        "TrainingLossNaN",
        "train_loss != train_loss",
        "1m", "critical",
        "the training loss is NaN",
        "Roll back to the last good checkpoint and lower the learning rate or skip the batch.",
    )  # fmt: skip
    notes = [] if net > 0 else ["single node: no scale-out bandwidth alert"]
    return "\n".join(lines) + "\n", notes


def _panel(panel_id: int, title: str, unit: str, targets: list[tuple[str, str]], x: int, y: int) -> dict:
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": title,
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


GRAFANA_UID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
"""Grafana's rule for dashboard uids (util.IsValidShortUID: letters, digits, '-' and '_', at most 40)."""


def grafana_uid(doc: PlanDocument) -> str:
    """``capplan-<model>-<plan hash>``: valid for Grafana, unique per plan (the hash is kept whole)."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", doc.arch.slug).strip("-")[: 40 - len("capplan--") - 8]
    return f"capplan-{slug}-{plan_hash(doc)}"


def grafana_dashboard(doc: PlanDocument) -> tuple[str, list[str]]:
    """A Grafana dashboard (JSON model) for the training job, with the predictions drawn as reference lines."""
    est = doc.estimate
    peak_mib = est.peak_memory_bytes / MIB
    net = expected_scale_out_bytes_per_s_per_node(doc)
    panels = [
        _panel(1, "Tokens/s vs predicted", "short", [
            ("sum(train_tokens_per_second)", "measured"),
            (f"vector({est.tokens_per_s:.0f})", "predicted"),
            (f"vector({est.tokens_per_s * THROUGHPUT_FRACTION:.0f})", f"alert below ({THROUGHPUT_FRACTION:.0%})"),
        ], 0, 0),
        _panel(2, "GPU memory in use vs predicted peak", "decmbytes", [
            ("max(DCGM_FI_DEV_FB_USED)", "max over GPUs"),
            (f"vector({peak_mib:.0f})", "predicted peak"),
            (f"vector({est.usable_memory_bytes / MIB:.0f})", "usable"),
        ], 12, 0),
        _panel(3, "GPU utilisation and tensor-core activity", "percent", [
            ("avg(DCGM_FI_DEV_GPU_UTIL)", "utilisation"),
            ("100 * avg(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)", "tensor active"),
            (f"vector({100 * est.mfu:.1f})", "predicted MFU"),
        ], 0, 8),
        _panel(4, "Scale-out traffic per node", "Bps", [
            (f"sum by (instance) (rate({_network_metric(doc)}[5m]))", "{{instance}}"),
            (f"vector({net:.0f})", "expected"),
        ], 12, 8),
        _panel(5, "Loss", "short", [("train_loss", "loss"), ("avg_over_time(train_loss[1h])", "1 h average")], 0, 16),
    ]  # fmt: skip
    dashboard = {
        "title": f"capplan · {unique_name(doc)}",
        "uid": grafana_uid(doc),
        "tags": ["capplan", "training"],
        "schemaVersion": 39,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus"}]},
        "description": (
            f"Predicted by capplan: {est.tokens_per_s:,.0f} tokens/s, MFU {est.mfu:.1%}, step {est.step_time_s:.2f} s, "
            f"peak {peak_mib / 1024:.1f} GiB per GPU."
        ),
        "panels": panels,
    }
    return json.dumps(dashboard, indent=2, sort_keys=True) + "\n", []
