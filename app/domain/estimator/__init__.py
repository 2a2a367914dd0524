"""The estimator: one plan on one cluster → memory per rank, step time, throughput, with every assumption.

What lives where (import from the module; this package exports nothing itself):

- Plan and its rules: ``plan`` (the plan record, its validation), ``rules`` (the one table of plan rules, for
  a plan and for the search's arrays), ``capabilities`` (its rows of what each framework can run, and the
  nearest plan a framework runs), ``sharding``, ``schedule`` (pipeline schedules), ``pipeline`` (stage layout).
- The hardware the plan runs on: ``hardware`` (accelerators, nodes, fabrics, topologies), ``efficiency``
  (efficiency priors), ``cluster`` (a built cluster), ``overrides`` (per-plan figure overrides).
- The per-rank model: ``activations`` (per layer), ``saved_rows`` (Megatron's recompute modules and Transformer
  Engine's FP8-saved inputs on those rows), ``head_activations`` (embedding, output head, logits), ``memory``,
  ``compute``, ``network``, ``context_parallel`` (ring attention's costs), ``step``; ``evaluate`` (the
  formulas shared by scalar estimates and the array search), ``xp`` (scalar/array helpers), ``assemble``
  (their inputs from catalog objects) and ``estimate`` (the result with its assumptions).
- Accuracy: ``published`` (reference runs), ``validation`` (estimates against them), ``fitting`` and
  ``fitted`` (the fit of the efficiency constants and its record), ``calibration`` (from benchmark runs).

It imports neither the cost model, the search nor the exports (import-linter checks it).
"""
