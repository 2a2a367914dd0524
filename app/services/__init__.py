"""Use-cases shared by the API, the pages and the CLI: resolve inputs against the catalog, run the domain.

One module per use-case; import the one you need (this package imports nothing, so the CLI can load a
use-case without SQLAlchemy):

- ``errors``           InputError — bad input as ``{loc, msg, type}`` items (422 / form messages / exit 2)
- ``estimate``         one estimate: model and cluster resolved, calibration and overrides applied
- ``scenario``         THE pipeline: estimate → reliability → cost per option → plan document, once,
                       as one frozen ScenarioResult that every surface renders
- ``cost``             training cost per pricing option; the monthly bill of a cluster
- ``documents``        plan documents (capplan.plan/v1) and their exports
- ``search``           the plan search (same clusters, overrides, calibration and pricing as the pipeline)
- ``saved_scenarios``  saved scenarios in the database (SQLAlchemy)
- ``benchmarks``       benchmark runs and the calibration they give (SQLAlchemy)
- ``size``             the sizing search: every accelerator, cluster size, plan and pricing option
                       (request and answer in ``app.schemas.size``)
- ``size_offers``      the sizing's offers per node and the self-build's cost at a cluster size
- ``size_bounds``      the sizing's lower bounds of days and dollars, and each size's goodput
- ``size_jobs``        the size page's background sizing runs and their progress
- ``hub_cache``        a Hugging Face id's config.json from the local Hugging Face cache (no network)
- ``shared_configs``   config.json files stored for short planner links (SQLAlchemy)
"""
