"""What it costs: train N tokens on AWS (every pricing option) or on a cluster you build, and the monthly
bill of a cluster either way.

The model (every input overridable through :class:`CostOverrides`; defaults from ``data/prices.toml`` and
``data/selfbuild.toml`` with their sources and dates, or documented defaults marked ``default``):

**Cloud**, per instance-hour of the AWS instance that carries the plan's accelerator (p5.48xlarge for
H100), prices in force on ``prices_as_of`` (default: the current, open-ended price):

- ``on-demand``; ``commit-1yr`` / ``commit-3yr``: the instance's own commitment rate, else on-demand ×
  (1 − the catalog's average commitment discount). A run shorter than the term still pays the term:
  ``run_usd`` is the usage at the committed rate, ``committed_usd`` what is owed (rate × instances ×
  max(run, term)); ``total_usd`` counts the committed amount.
- ``spot``: the median of the latest observed per-AZ prices; interruptions (per instance-month, an input)
  join the failure rate, so spot runs have a lower goodput; capacity for multi-node jobs is not guaranteed.
- ``capacity-block``: the dated Capacity Block rate (limits on duration and instances noted).
- ``off-peak``: on-demand less the article's ~30 % (an input, not an AWS price); ``off_peak_hours_per_day``
  below 24 stretches the calendar.
- ``reserved-spot-mix``: a share of the instances on a 1-year commitment, the rest on spot.
- Storage (S3 Standard tiers) for the dataset and kept checkpoints over the run, data movement (internet
  egress tiers, inter-region) — the article's "data locality".

**Self-build**: servers + fabric sized from the topology
(:func:`app.domain.estimator.hardware.fat_tree_switch_counts`: switches, cables, transceivers; NICs) + storage + installation = capex; opex per month = power (nodes ×
kW × average draw × PUE × $/kWh × 730 h) + colocation ($/kW-month on the provisioned IT kW) + staff +
maintenance; capital per month = the annuity that repays capex less residual value over the depreciation
years at the cost of capital. Monthly equivalent = capital + opex. Break-even month (cash: capex up front
+ opex against the cloud bill) and the utilisation above which owning is cheaper than paying per hour.

Time: compute hours = tokens / tokens per second; wall clock = compute / goodput
(:mod:`app.domain.reliability`). A month is 730 hours.

What lives where (import from the module; this package exports nothing itself):

- ``inputs``: the pricing options (:class:`CostOption`), :class:`CostOverrides` / :class:`SelfBuildOverrides`,
  :class:`CostInputError`, documented defaults, and the helpers that record each figure as an assumption.
- ``price_records`` / ``selfbuild_records``: the records of ``data/prices.toml`` and ``data/selfbuild.toml``
  (figures only) and :class:`CostCatalog`; loaded by :mod:`app.domain.catalog.cost_files`.
- ``cloud``: prices per instance-hour for every cloud option, regions, commitments.
- ``selfbuild``: capex (servers, fabric, storage, installation), opex (power, colocation, staff,
  maintenance), capital per month, residual value, break-even.
- ``storage``: S3 storage of the dataset and checkpoints, egress and inter-region transfer.
- ``serving``: whether the trained model serves on the priced node.
- ``training``: train N tokens under every option, ranked (:func:`training_cost`).
- ``summary``: that cost as a buyer reads it — cash and amortised side by side, $ per million tokens, the
  rankings with their ties, the prices' day and region (:func:`cost_summary`).
- ``monthly``: the monthly bill of a cluster, rented or owned (:func:`monthly_cost`).
- ``gpu_hour``: one price per GPU-hour per option, for the plan search.
"""
