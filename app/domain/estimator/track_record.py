"""How far off capplan has been, out of sample, on published runs like a plan: the estimate's own error bar.

The last fit (data/fitted.toml, written by ``capplan calibrate-published``) records for every scored run its
cross-validated error: predicted / published − 1 of the run's throughput with the run's source family left out of
the fit (README, Accuracy). The runs comparable to a plan are grouped by the aspects the estimator handles with
different mechanisms and constants:

* the software stack its framework belongs to (Megatron-Core/NeMo, PyTorch FSDP/torchtitan, DeepSpeed);
* the GPU it runs on;
* the regimes where the estimator is known to behave differently, when the plan is in one: context parallelism
  (cp > 1) and sequences of 32K tokens or more — the runs that share the plan's side of both (cp > 1 at 128K
  tokens is compared with CP runs at 32K+, not with CP runs at 8K) — and mixture-of-experts models;
* strong scaling, when the plan gives each GPU fewer than :data:`FEW_TOKENS_PER_GPU` tokens a step (global batch ×
  sequence length / GPUs): the runs that do the same. There the per-step costs that do not shrink with the work
  (the DP reduction of the model-parallel shard, the pipeline's fill and drain, latency-bound collectives) weigh
  most, and capplan has predicted those runs too fast (MLPerf's Llama 3.1 8B on 512 GB200 at 1,024 tokens a GPU,
  GPT-3 175B on 10,752 H100 at 512: README, Accuracy);
* the GEMM precision, when it is below 16 bits: the FP8 runs for an FP8 plan, the NVFP4 runs for an NVFP4 one (each
  with a fitted GEMM ratio of its own, and NVFP4's rests on few runs);
* the stack's runs published in the :data:`RECENT_MONTHS` months before the fit — the software a plan made today
  runs. The estimator has no software-version term and each stack's releases keep getting faster (NVIDIA's
  Llama 3.1 405B FP8 on GB200: 665 tokens/s a GPU with NeMo 25.04, 843 with NeMo 26.06, where capplan's plan
  difference accounts for +4 %), so this group's bias says how far the fit, spread over years of releases, trails
  the current ones. A stack with fewer recent runs than :data:`MIN_RUNS` gets no group, only a sentence saying so.

Each group reports its median |error|, its median signed error (the bias: positive = capplan predicted faster
than published) and its worst |error|. The plan's ``typical_abs_error`` is the largest group median: a plan is as
uncertain as its least-understood aspect. A group with fewer than :data:`MIN_RUNS` scored runs is *thin* — too few
runs to say — and a GPU with none says that its efficiencies are assumed, not fitted.

Hand-worked example (``tests/domain/test_track_record.py``): errors +0.10, −0.20, +0.05 on three H100 runs give a
median |error| of 0.10, a median signed error of +0.05 and a worst of 0.20.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from app.domain.provenance import Frozen

# The Estimate model holds a TrackRecord: importing this module must not load the published runs' module.
if TYPE_CHECKING:
    from app.domain.estimator.published import PublishedRun

MIN_RUNS = 3  # fewer scored runs than this in a group: too few to state a typical error
RECENT_MONTHS = 12  # "today's software": runs published within this many months before the fit
WIDE_ERROR = 0.15  # a typical error above this (or none known) is marked on the planner
LONG_SEQUENCE_TOKENS = 32768  # "long sequence" regime: the attention term dominates a layer's time
# "strong scaling" regime: under one 2K-token sequence's worth of tokens per GPU per step
FEW_TOKENS_PER_GPU = 2048

LOW_PRECISION_LABEL = {"fp8": "FP8", "nvfp4": "NVFP4"}  # GEMM precisions with a group of their own
STACK_OF_PLAN_FRAMEWORK = {"megatron": "megatron", "fsdp2": "fsdp", "deepspeed": "deepspeed"}
STACK_LABEL = {
    "megatron": "Megatron-Core / NeMo",
    "fsdp": "PyTorch FSDP / torchtitan",
    "deepspeed": "DeepSpeed",
    "composer": "Composer",
}


class ComparableRuns(Frozen):
    """One group of published runs comparable to the plan, with capplan's out-of-sample errors on them."""

    aspect: str  # "stack", "gpu", "regime", "precision" or "software"
    label: str
    runs: int
    median_abs_error: float | None
    median_error: float | None  # the bias: + = capplan predicted faster than published
    worst_abs_error: float | None

    @property
    def thin(self) -> bool:
        return self.runs < MIN_RUNS


class TrackRecord(Frozen):
    """capplan's out-of-sample record on published runs like the plan (see the module docstring)."""

    fit_date: str | None
    groups: tuple[ComparableRuns, ...]
    typical_abs_error: float | None
    thin: bool
    summary: str

    @property
    def wide(self) -> bool:
        """No typical error known, or one above :data:`WIDE_ERROR`: read the estimate with care."""
        return self.typical_abs_error is None or self.typical_abs_error > WIDE_ERROR


def _group(aspect: str, label: str, errors: Sequence[float]) -> ComparableRuns:
    if not errors:
        return ComparableRuns(aspect=aspect, label=label, runs=0, median_abs_error=None, median_error=None,
                              worst_abs_error=None)  # fmt: skip
    return ComparableRuns(
        aspect=aspect, label=label, runs=len(errors), median_abs_error=statistics.median(abs(e) for e in errors),
        median_error=statistics.median(errors), worst_abs_error=max(abs(e) for e in errors),
    )  # fmt: skip


def _describe(g: ComparableRuns) -> str:
    if g.runs == 0:
        return f"{g.label}: no published run scored"
    runs = f"{g.runs} run{'s' if g.runs != 1 else ''}"
    bias = "faster" if (g.median_error or 0) > 0 else "slower"
    return (
        f"{g.label}: median {g.median_abs_error:.1%} over {runs} (capplan {bias} by a median "
        f"{abs(g.median_error or 0):.1%}, worst {g.worst_abs_error:.1%})"
    )


def run_tokens_per_gpu_step(run: PublishedRun) -> float:
    """Tokens each GPU of a published run works on a step: global batch × sequence length / GPUs (infinite where
    the global batch is not published, so such a run is in no strong-scaling group). MLPerf's Llama 3.1 8B on 512
    GB200: 64 · 8,192 / 512 = 1,024."""
    return run.global_batch * run.seq_len / run.n_gpus if run.global_batch else float("inf")


def recent_cutoff(fit_date: str, months: int = RECENT_MONTHS) -> str:
    """The "YYYY-MM" ``months`` before the fit's month: "2026-12-07" → "2025-12". A run dated by its year alone
    counts from January (as_of "2026" ≥ "2025-12"), its month unknown."""
    year, month = int(fit_date[:4]), int(fit_date[5:7])
    total = year * 12 + (month - 1) - months
    return f"{total // 12:04d}-{total % 12 + 1:02d}"


def track_record(
    framework: str,
    accelerator: str,
    cp: int,
    seq_len: int,
    moe: bool,
    runs: Sequence[PublishedRun],
    cv_errors: Mapping[str, float],
    fit_date: str | None = None,
    precision: str = "bf16",
    tokens_per_gpu_step: float | None = None,
) -> TrackRecord:
    """The out-of-sample record of the published runs comparable to a plan of ``framework`` on ``accelerator``
    with context parallelism ``cp``, sequences of ``seq_len`` tokens, a MoE (``moe``) or dense model and GEMMs in
    ``precision``, giving each GPU ``tokens_per_gpu_step`` tokens a step (global batch × sequence length / GPUs).
    ``cv_errors``: run slug → cross-validated error (data/fitted.toml); runs without one are not scored."""
    scored = [(r, cv_errors[r.slug]) for r in runs if r.slug in cv_errors]

    def errors(keep: Callable[[PublishedRun], bool]) -> list[float]:
        return [e for r, e in scored if keep(r)]

    stack = STACK_OF_PLAN_FRAMEWORK.get(framework, framework)
    groups = [
        _group("stack", STACK_LABEL.get(stack, stack), errors(lambda r: r.stack == stack)),
        _group("gpu", f"on {accelerator}", errors(lambda r: r.accelerator == accelerator)),
    ]
    long_k = f"{LONG_SEQUENCE_TOKENS // 1024}K"
    long = seq_len >= LONG_SEQUENCE_TOKENS
    if cp > 1 or long:
        label = ("with context parallelism" if cp > 1 else "without context parallelism") + (
            f" at {long_k} tokens or more" if long else f" under {long_k} tokens"
        )
        groups.append(_group("regime", label, errors(
            lambda r: ((r.cp or 1) > 1) == (cp > 1) and (r.seq_len >= LONG_SEQUENCE_TOKENS) == long
        )))  # fmt: skip
    if moe:
        groups.append(_group("regime", "mixture-of-experts models", errors(lambda r: r.n_experts > 0)))
    if tokens_per_gpu_step is not None and tokens_per_gpu_step < FEW_TOKENS_PER_GPU:
        groups.append(_group("regime", f"strong scaling (under {FEW_TOKENS_PER_GPU:,} tokens per GPU a step)",
                             errors(lambda r: run_tokens_per_gpu_step(r) < FEW_TOKENS_PER_GPU)))  # fmt: skip
    if precision in LOW_PRECISION_LABEL:
        groups.append(_group("precision", f"{LOW_PRECISION_LABEL[precision]} runs",
                             errors(lambda r: r.precision == precision)))  # fmt: skip
    since = recent_cutoff(fit_date) if fit_date else None
    recent = errors(lambda r: r.stack == stack and r.as_of >= since) if since else []
    stack_label = STACK_LABEL.get(stack, stack)
    if since and len(recent) >= MIN_RUNS:
        groups.append(
            _group("software", f"{stack_label} runs published since {since} (today's software)", recent)
        )
    known = [g.median_abs_error for g in groups if g.median_abs_error is not None and not g.thin]
    typical = max(known) if known else None
    thin = any(g.thin for g in groups)
    if not scored:
        summary = "no out-of-sample record: the fit (data/fitted.toml) holds no cross-validated errors"
    else:
        head = (
            f"typical error ±{typical:.0%} (the largest median below)" if typical is not None
            else "no typical error: too few comparable published runs"
        )  # fmt: skip
        tail = "; ".join(_describe(g) for g in groups)
        summary = f"{head}. Out of sample on published runs — {tail}"
        if any(g.aspect == "gpu" and g.runs == 0 for g in groups):
            summary += f"; no published run on {accelerator}: its efficiencies are assumed, not fitted"
        elif thin:
            summary += f"; groups under {MIN_RUNS} runs are too thin to state a typical error"
        if since and len(recent) < MIN_RUNS:
            summary += (
                f"; {len(recent) or 'no'} {stack_label} run{'s' if len(recent) != 1 else ''} scored "
                f"{'was' if len(recent) == 1 else 'were'} published since {since}: how the stack's newer releases "
                "move the figures is not measured"
            )
    return TrackRecord(fit_date=fit_date, groups=tuple(groups), typical_abs_error=typical, thin=thin,
                       summary=summary)  # fmt: skip
