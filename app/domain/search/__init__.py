"""The plan search: the same estimator on arrays, over every plan of a space.

What lives where (import from the module; this package exports nothing itself):

- ``engine``: the search space, the masks of the plan rules, evaluation on arrays, ranking.
- ``sizing``: choosing a cluster size, GPU and way to pay; the Pareto front of days, dollars and headroom.
"""
