"""The JSON API under ``/api/v1``, one router module per resource; each handler validates its request model
(``app.schemas``), calls one use-case (``app.services``) and answers 422 with the field and the reason on bad input.

- ``estimate``   POST /estimate                 - ``cost``       POST /cost, /cost/monthly
- ``search``     POST /plans/search             - ``plans``      POST /plans/export
- ``size``       POST /size (+ the size page's jobs)
- ``catalog``    GET /catalog/{kind}[/{slug}]   - ``scenarios``  saved scenarios (CRUD, optimistic locking)
- ``benchmarks`` benchmark runs and calibration - ``health``     liveness and database health
"""
