"""capplan: capacity and cost planning for LLM training clusters.

Layers, outermost first (import-linter enforces them, see pyproject.toml):

- ``cli``, ``main``       — the `capplan` command line; ``create_app`` (FastAPI) for `capplan serve`
- ``api``, ``web``        — the JSON API (``/api/v1``) and the HTML pages (htmx), thin handlers over ``services``
- ``services``            — one use-case per module (estimate, the scenario pipeline, cost, search, size, …)
- ``db``                  — SQLAlchemy tables, engine, migrations, backups (saved scenarios, benchmark runs)
- ``domain``              — pure computation: catalog, model, estimator, search, cost, reliability, export

Beside them: ``schemas`` (pydantic I/O models), ``settings`` (the one Settings object), ``bench`` (the GPU
benchmark runner, the only code that imports torch), ``calibration_store`` (shipped and stored benchmark runs →
calibrations), ``perf`` (`make bench`: capplan's own speed), ``deps``, ``metrics`` and ``live_server`` (the app on a
loopback port for the browser tests).
"""
