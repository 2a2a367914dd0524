"""Failures, checkpoints and goodput: how much of the wall clock a training job spends training.

The model, in the order the numbers are derived (every input overridable through
:class:`ReliabilityOverrides`; defaults from ``data/reliability.toml`` with their sources):

- **Failure rate** per GPU-hour, from a published run (default: Llama 3 405B, 419 unexpected
  interruptions in 54 days on 16,384 GPUs). Extra event sources add to it: spot interruptions
  (per instance-month, AWS Spot Advisor style) and NaN/loss-spike rollbacks (per day).
- **Job MTBF** ``M = 1 / (rate · GPUs + extra events per hour)``: one failed GPU stops a synchronous job.
- **Checkpoint size** = parameters × bytes per parameter of the resumable training state (the framework
  profile's weights + fp32 master + optimizer state; gradients are not saved).
- **Write time** = size / min(nodes × per-node write bandwidth, aggregate storage bandwidth).
  **Blocking time** ``δ``: the whole write when saving synchronously; with asynchronous save (PyTorch
  DCP ``async_save``) only the staging copy of each GPU's shard to host memory, at a staging rate
  derived from the at-scale measurement in the catalog (0.78 s for Llama3-70B on 1,856 H200). An asynchronous save still needs its background write to finish before the
  next one starts, so the interval is never shorter than the write time, and after a failure the
  checkpoint still being written is not there yet: that write time is re-done work.
- **Optimal interval** ``τ``: Young (1974) ``√(2δM)``, or Daly (2006)
  ``√(2δM)·[1 + ⅓√(δ/2M) + (1/9)(δ/2M)] − δ`` for ``δ < 2M``, else ``M`` (default: Daly).
- **Restart time** ``R`` = detect + reschedule + reload (size / read bandwidth) + warm-up; elastic
  training (TorchElastic, hot spares) replaces the reschedule by a re-rendezvous.
- **Goodput** (effective training time ratio) from Daly's expected wall time for exponential failures:
  ``goodput = τ / (M · e^{R/M} · (e^{(τ+δ)/M} − 1))``. It lies in (0, 1] and agrees with the reference's
  first-order waste ``δ/τ + τ/2M + R/M`` (reported too) while that is small; unlike it, it never goes
  negative. Waste fraction = 1 − goodput.
- The "checkpoint every 30 minutes" rule of thumb is evaluated the same way, against the optimum.

Units live in names: ``_s`` seconds, ``_hours``, ``_bytes``, ``_gbyte_per_s`` (10⁹ bytes/s).

What lives where (import from the module; this package exports nothing itself):

- ``records``: the records of ``data/reliability.toml`` (failure statistics, restart times, checkpoint
  figures); loaded by :mod:`app.domain.catalog.cost_files`.
- ``formulas``: the small pure functions above and :class:`ReliabilityOverrides`.
- ``report``: :func:`reliability_report`, every figure picked with its provenance, and its result types.
"""
