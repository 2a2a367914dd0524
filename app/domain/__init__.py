"""The domain: pure computation on typed inputs, no web framework, database or torch (import-linter's "domain is
pure"); only ``catalog`` reads files or the clock. Each subpackage's docstring says what lives in it.

- ``catalog``      the data files (hardware, prices, efficiencies, published runs, …) loaded and validated
- ``model``        the LLM: architecture records, parameter counts, Hugging Face config import, torch shapes
- ``estimator``    one plan on one cluster → memory per rank, step time, throughput; the fit on published runs
- ``search``       the estimator on arrays over every plan of a space; the catalog-wide sizing's ranking
- ``cost``         what training costs: cloud pricing options, self-build, storage, monthly bills
- ``reliability``  failures, checkpoints and goodput
- ``export``       a plan as runnable configuration (torchtitan, torchrun, Megatron-LM, DeepSpeed, Slurm, k8s)
- ``figures``, ``provenance``  figure formatting; every catalog figure's source, date and confidence
"""
