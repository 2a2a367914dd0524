"""The estimator's fitted constants: which catalog figures are fitted on published runs, their priors, and the
record of the last fit (``data/fitted.toml``, written by ``capplan calibrate-published``, never by hand).

A fitted constant is one figure shared by every run it applies to: the GEMM and attention efficiency of one GPU
generation, an overlap fraction of one software stack, or a term shared by every run (straggler jitter, power-cap
exponent, FP8 GEMM ratio, slowdown of compute under communication). Nothing is keyed on a single run or source.

The values in ``data/efficiency.toml`` are the priors: where the published runs cannot identify a constant (no
run on that GPU generation, or none that uses the mechanism) the fit leaves it at its prior, and it is reported as
"assumed". :func:`apply_fit` overlays the fitted values on the priors with their provenance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import Field

from app.domain.estimator.efficiency import EfficiencyCatalog
from app.domain.provenance import Confidence, FigureProvenance, Frozen

FITTED_FILE = "fitted.toml"
FIT_SOURCE = "CAPPLAN-FIT"

# GPU generations whose efficiencies are fitted together: same SM architecture and kernels, relative to each
# SKU's own peak. Other SKUs of a generation (PCIe/NVL cards at lower power) keep their assumed figures.
GENERATIONS: dict[str, tuple[str, ...]] = {
    "ampere": ("a100-40gb", "a100-80gb"),
    "hopper": ("h100-sxm", "h200-sxm"),
    "blackwell": ("b200", "gb200"),
    # GB300 has GB200's dense peaks at 1,400 W instead of 1,200 W, and NVIDIA's tables measure it 8-31 % faster
    # than GB200 on the same models: its own fractions of peak, fitted on its own rows. B300 is in no generation:
    # its figures stay at their prior (assumed), and its published rows are scored against them.
    "blackwell-ultra": ("gb300",),
}


@dataclass(frozen=True, slots=True)
class Parameter:
    """One fitted constant: where it lives in the efficiency catalog, its bounds, and how tight its prior is.

    ``part`` is "accelerator" (``slugs`` = the generation's accelerators), "stack" (``slugs`` = one framework),
    "runtime" (the host side: offloaded optimizer) or "scale". ``prior_sigma`` is the prior's width in the unbounded (logit) coordinate the fit works in.
    """

    name: str
    part: str
    slugs: tuple[str, ...]
    field: str
    lower: float
    upper: float
    prior_sigma: float
    description: str

    def prior(self, efficiency: EfficiencyCatalog) -> float:
        return _get(efficiency, self)

    def to_free(self, value: float) -> float:
        """Bounded value → unbounded coordinate (logit of the position between the bounds)."""
        u = (value - self.lower) / (self.upper - self.lower)
        u = min(max(u, 1e-6), 1 - 1e-6)
        return math.log(u / (1 - u))

    def from_free(self, x: float) -> float:
        return self.lower + (self.upper - self.lower) / (1 + math.exp(-x))


def _accelerator(gen: str, field: str, lower: float, upper: float, what: str) -> Parameter:
    return Parameter(
        name=f"{field.split('_')[0]}.{gen}", part="accelerator", slugs=GENERATIONS[gen], field=field,
        lower=lower, upper=upper, prior_sigma=1.0, description=f"{what} on {gen} GPUs ({', '.join(GENERATIONS[gen])})",
    )  # fmt: skip


PARAMETERS: tuple[Parameter, ...] = (
    *(_accelerator(g, "gemm_efficiency", 0.3, 0.95, "fraction of dense peak a GEMM reaches") for g in GENERATIONS),
    *(
        _accelerator(g, "attention_efficiency", 0.1, 0.9, "fused attention forward+backward, fraction of peak")
        for g in GENERATIONS
    ),
    *(
        _accelerator(g, "fa3_attention_efficiency", 0.2, 0.95,
                     "FlashAttention-3/-4 forward+backward, fraction of peak")  # fmt: skip
        for g in ("hopper", "blackwell")
    ),
    Parameter("tp_overlap.megatron", "stack", ("megatron",), "tp_overlap", 0.0, 0.95, 1.0,
              "fraction of TP collectives Megatron-Core + TE hides behind GEMMs with --tp-comm-overlap"),
    Parameter("tp_overlap.fsdp2", "stack", ("fsdp2",), "tp_overlap", 0.0, 0.95, 1.0,
              "fraction of TP collectives torchtitan's async TP hides behind GEMMs"),
    Parameter("ep_overlap.megatron", "stack", ("megatron",), "ep_overlap", 0.0, 0.95, 1.0,
              "fraction of MoE token all-to-alls Megatron-Core hides behind compute"),
    Parameter("dp_overlap.megatron", "stack", ("megatron",), "dp_overlap", 0.0, 1.0, 1.0,
              "fraction of the overlappable DP traffic Megatron's (distributed) optimizer hides"),
    Parameter("dp_overlap.fsdp2", "stack", ("fsdp2",), "dp_overlap", 0.0, 1.0, 1.0,
              "fraction of the overlappable FSDP gather/reduce-scatter traffic FSDP hides"),
    Parameter("dp_overlap.deepspeed", "stack", ("deepspeed",), "dp_overlap", 0.0, 1.0, 1.0,
              "fraction of the overlappable ZeRO traffic DeepSpeed hides"),
    Parameter("cpu_optimizer", "runtime", (), "cpu_optimizer_gb_per_s", 2.0, 80.0, 1.0,
              "host-memory traffic a CPU Adam step (DeepSpeed's DeepSpeedCPUAdam) sustains per GPU it serves, GB/s"),
    Parameter("straggler_cv", "scale", (), "straggler_cv", 0.0, 0.1, 1.0,
              "per-rank step jitter; a synchronous step waits cv·√(2 ln N) longer"),
    Parameter("power_exponent", "scale", (), "power_exponent", 0.0, 1.5, 1.0,
              "sustained clock under a power cap ∝ (P/TDP)^γ"),
    Parameter("fp8_gemm_ratio", "scale", (), "fp8_gemm_ratio", 0.3, 1.0, 1.0,
              "FP8 GEMM fraction of FP8 peak relative to BF16 GEMM fraction of BF16 peak"),
    Parameter("fp4_gemm_ratio", "scale", (), "fp4_gemm_ratio", 0.2, 1.0, 1.0,
              "NVFP4 GEMM fraction of FP4 peak relative to BF16 GEMM fraction of BF16 peak"),
    Parameter("comm_slowdown", "scale", (), "comm_slowdown", 0.0, 0.6, 1.0,
              "compute stretched by this fraction of the communication it hides"),
    Parameter("fa1_attention_ratio", "scale", (), "fa1_attention_ratio", 0.2, 1.0, 1.0,
              "FlashAttention-1-class kernels relative to FlashAttention-2"),
    Parameter("cudnn_attention_ratio", "scale", (), "cudnn_attention_ratio", 1.0, 3.0, 1.0,
              "cuDNN fused attention (Transformer Engine) relative to FlashAttention-2 on Hopper and Blackwell"),
    Parameter("ring_attention_ratio", "scale", (), "ring_attention_ratio", 0.2, 1.5, 1.0,
              "a context-parallel ring step's attention rate relative to the single kernel on the same block"),
    Parameter("kernel_overhead_us", "scale", (), "kernel_overhead_us", 0.0, 20.0, 1.0,
              "fixed cost of one memory-bound kernel beyond its bytes (launch gap, ramp and tail), µs"),
)  # fmt: skip


def _get(efficiency: EfficiencyCatalog, p: Parameter) -> float:
    if p.part == "accelerator":
        return float(getattr(efficiency.for_accelerator(p.slugs[0]), p.field))
    if p.part == "stack":
        return float(getattr(efficiency.for_stack(p.slugs[0]), p.field))
    if p.part == "runtime":
        return float(getattr(efficiency.runtime, p.field))
    return float(getattr(efficiency.scale, p.field))


class FitRecord(Frozen):
    """The last fit: when, on which runs and families, the values, and the fit's own error figures."""

    date: str
    command: str = "capplan calibrate-published"
    runs: tuple[str, ...]
    families: tuple[str, ...]
    values: dict[str, float]
    runs_per_parameter: dict[str, int] = Field(default_factory=dict)
    fit_median_abs_error: float | None = None
    cv_median_abs_error: float | None = None
    cv_max_abs_error: float | None = None
    configurations: int | None = Field(
        default=None, description="distinct configurations among the runs (fitting.configuration_key)"
    )
    cv_distinct_median_abs_error: float | None = Field(
        default=None, description="out-of-sample median |error| with each configuration counted once"
    )
    cv_errors: dict[str, float] = Field(
        default_factory=dict, description="run → error when its source family was left out of the fit"
    )

    def fitted(self, name: str) -> bool:
        """Whether ``name`` was identified by at least one run (else it stayed at its prior: assumed)."""
        return self.runs_per_parameter.get(name, 0) > 0


def _note(record: FitRecord, p: Parameter) -> str:
    return (
        f"fitted by `{record.command}` on {record.date}: {record.runs_per_parameter.get(p.name, 0)} of "
        f"{len(record.runs)} published runs inform it ({len(record.families)} source families); "
        f"cross-validated median |error| {record.cv_median_abs_error:.1%}"
        if record.cv_median_abs_error is not None
        else f"fitted by `{record.command}` on {record.date} on {len(record.runs)} published runs"
    )


def apply_values(
    efficiency: EfficiencyCatalog, values: dict[str, float], record: FitRecord | None = None
) -> EfficiencyCatalog:
    """``efficiency`` with ``values`` (parameter name → value) in place; with ``record``, every fitted figure
    carries its provenance (CAPPLAN-FIT, the date and the runs), and figures the runs did not inform keep theirs."""
    by_name = {p.name: p for p in PARAMETERS}
    unknown = sorted(set(values) - set(by_name))
    if unknown:
        raise KeyError(f"unknown fitted parameters {unknown}; known: {sorted(by_name)}")

    def provenance(entry, p: Parameter) -> dict:
        if record is None or not record.fitted(p.name):
            return dict(entry.provenance)
        prov = FigureProvenance(
            source=FIT_SOURCE, as_of=record.date[:7], confidence=Confidence.medium, note=_note(record, p)
        )
        return {**entry.provenance, p.field: prov}

    accelerators = list(efficiency.accelerators)
    stacks = list(efficiency.stacks)
    scale = efficiency.scale
    runtime = efficiency.runtime
    for name, value in values.items():
        p = by_name[name]
        if p.part == "accelerator":
            for i, entry in enumerate(accelerators):
                if entry.slug in p.slugs:
                    accelerators[i] = entry.model_copy(
                        update={p.field: value, "provenance": provenance(entry, p)}
                    )
        elif p.part == "stack":
            for i, entry in enumerate(stacks):
                if entry.slug in p.slugs:
                    stacks[i] = entry.model_copy(update={p.field: value, "provenance": provenance(entry, p)})
        elif p.part == "runtime":
            runtime = runtime.model_copy(update={p.field: value, "provenance": provenance(runtime, p)})
        else:
            scale = scale.model_copy(update={p.field: value, "provenance": provenance(scale, p)})
    return efficiency.model_copy(
        update={
            "accelerators": tuple(accelerators),
            "stacks": tuple(stacks),
            "scale": scale,
            "runtime": runtime,
        }
    )


def fit_record_toml(record: FitRecord) -> str:
    """The text of ``data/fitted.toml`` for ``record`` (stable order, so a refit diffs cleanly)."""

    def q(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    def items(values: tuple[str, ...]) -> str:
        return "[\n" + "".join(f"  {q(v)},\n" for v in values) + "]"

    lines = [
        "# Generated by `capplan calibrate-published` from the published runs in data/published_runs*.toml.",
        "# Do not edit by hand: change the runs or the model and run the command again. The priors are in",
        "# data/efficiency.toml; see app/domain/estimator/fitting.py for the fit and README (Accuracy) for the figures.",
        "[fit]",
        f"date = {q(record.date)}",
        f"command = {q(record.command)}",
    ]
    for name in (
        "fit_median_abs_error",
        "cv_median_abs_error",
        "cv_max_abs_error",
        "cv_distinct_median_abs_error",
    ):
        value = getattr(record, name)
        if (
            value is not None
        ):  # five decimals: shown to 0.1 %, a fourth-decimal 5 must not round twice (7.453 → 7.45 → 7.4)
            lines.append(f"{name} = {value:.5f}")
    if record.configurations is not None:
        lines.append(f"configurations = {record.configurations}")
    lines.append(f"runs = {items(record.runs)}")
    lines.append(f"families = {items(record.families)}")
    lines.append("")
    lines.append("[fit.values]")
    lines += [f"{q(p.name)} = {record.values[p.name]:.4f}" for p in PARAMETERS if p.name in record.values]
    lines.append("")
    lines.append("[fit.runs_per_parameter]")
    lines += [f"{q(p.name)} = {record.runs_per_parameter.get(p.name, 0)}" for p in PARAMETERS]
    if record.cv_errors:
        lines.append("")
        lines.append(
            "[fit.cv_errors]  # predicted/published - 1 with the run's source family left out of the fit"
        )
        lines += [f"{q(run)} = {record.cv_errors[run]:.4f}" for run in sorted(record.cv_errors)]
    return "\n".join(lines) + "\n"
