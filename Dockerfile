# capplan web app: FastAPI + uvicorn, one worker per container (scale with replicas).
#   docker build -t capplan .
#   docker run -p 8000:8000 -e CAPPLAN_API_TOKEN=… capplan      # SQLite in /app/var
#   docker compose up                                           # with PostgreSQL, Prometheus, Grafana
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# app/settings.py resolves templates/, static/, data/ and alembic/ next to the app/ package (REPO_ROOT),
# and those directories are not in the wheel. So the source tree lives in /app and the package is
# installed in editable mode: `capplan` then imports /app/app and finds its files.
# Explicit COPYs (not `COPY . .`) keep .venv, var/ and test output out of the image.
# constraints.tx[t] / README.m[d]: the globs let the build go on when the file is absent.
COPY pyproject.toml README.m[d] constraints.tx[t] ./
COPY app/ app/
COPY alembic/ alembic/
COPY data/ data/
COPY templates/ templates/
COPY static/ static/

RUN if [ -f constraints.txt ]; then \
        pip install -c constraints.txt -e .; \
    else \
        echo "constraints.txt not found: installing unpinned" >&2; \
        pip install -e .; \
    fi \
 && useradd --create-home --uid 10001 --user-group capplan \
 && mkdir -p /app/var \
 && chown capplan:capplan /app/var

USER capplan

EXPOSE 8000

# Liveness/readiness: /healthz checks the app and its database. No curl in -slim, so use urllib
# (urlopen raises on any non-2xx status, which exits non-zero).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]

# Migrations first (the app never calls create_all), then serve. Arguments given to `docker run`
# replace CMD, e.g. `docker run capplan capplan catalog list accelerators`.
ENTRYPOINT ["/bin/sh", "-c", "capplan db upgrade && exec \"$@\"", "capplan-entrypoint"]
CMD ["capplan", "serve", "--host", "0.0.0.0", "--port", "8000", "--no-upgrade-db"]
