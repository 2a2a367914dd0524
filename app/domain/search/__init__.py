"""The plan search: the same estimator on arrays, over every plan of a space.

What lives where (import from the module; this package exports nothing itself):

- ``spec``: what a search is asked (SearchSpec, Objective) and answers (Candidate, SearchResult); the shardings,
  offloads and recomputes each framework offers.
- ``space``: the space laid out as numpy columns and the masks of the plan rules and framework capabilities.
- ``engine``: evaluation on arrays (the estimator's per-rank formulas), ranking, the Pareto front, explanations.
- ``run_pricing``: days after failures and dollars for the search's rows (the cost model's curve, or a flat rate).
- ``sizing``: choosing a cluster size, GPU and way to pay; the Pareto front of days, dollars and headroom.
"""
