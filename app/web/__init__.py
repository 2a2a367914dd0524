"""The HTML pages (FastAPI + Jinja + htmx 4), hidden from the OpenAPI schema: the planner (home page), "Find the
best plan", "Size a cluster", prices, saved scenarios, benchmark runs, the catalog and the accuracy page. Handlers
are thin: they parse the query string or form (``forms``), call the use-case in ``app.services`` and render one
template; an htmx request gets only the block it asked for (``htmx``).

- ``routes``      the pages' routes           - ``planner``, ``plan_start``  the planner and its opening layout
- ``search``      the plan search page        - ``size``                     the sizing page and its job progress
- ``prices``, ``scenarios``, ``benchmarks``, ``share``  the other pages and short links
- ``forms``       query string ⇄ request, with per-field messages
- ``charts``      ECharts options from domain results (plain JSON)
- ``cost_view``   cost as the pages show it   - ``glossary``  the words the planner uses
- ``templating``  the Jinja environment and its filters   - ``security``  CSRF and the optional login
"""
