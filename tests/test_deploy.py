"""Deployment files agree with each other: Dockerfile, docker-compose.yml, Prometheus and Grafana config.

No Docker here (CI has no image registry), so these are static checks of the wiring that usually breaks
silently: a URL naming the wrong host or port, an unpinned image, a dashboard querying a metric the app
does not export.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from app.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DEPLOY = ROOT / "deploy"
PROMETHEUS_YML = DEPLOY / "prometheus" / "prometheus.yml"
GRAFANA = DEPLOY / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "capplan-app.json"

# Metrics the dashboard may query: prometheus-fastapi-instrumentator's defaults, app/metrics.py's, `up`.
KNOWN_METRICS = {
    "up",
    "http_requests_total",
    "http_request_duration_seconds",
    "http_request_duration_highr_seconds",
    "http_request_size_bytes",
    "http_response_size_bytes",
    "capplan_estimates_total",
    "capplan_estimate_duration_seconds",
    "capplan_searches_total",
    "capplan_benchmark_results_ingested_total",
    "capplan_catalog_entries",
}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or"}
PROMQL_WORDS |= {"unless", "inf", "nan"}


# --- helpers -----------------------------------------------------------------------------------------


def load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def compose() -> dict:
    return load_yaml(COMPOSE)


@pytest.fixture(scope="module")
def services(compose: dict) -> dict[str, dict]:
    return compose["services"]


def env_of(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # ["KEY=value", …]
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def port_mappings(service: dict) -> list[tuple[str, str]]:
    """(published, container) pairs, short ("[ip:]host:container[/proto]") or long syntax."""
    pairs = []
    for port in service.get("ports") or []:
        if isinstance(port, dict):
            pairs.append((str(port["published"]), str(port["target"])))
        else:
            parts = str(port).split("/")[0].split(":")
            assert len(parts) >= 2, f"port {port!r}: publish explicitly as host:container"
            pairs.append((parts[-2], parts[-1]))
    return pairs


def bind_mounts(service: dict) -> dict[str, str]:
    """container path -> host path (relative to the repo), for ./… bind mounts."""
    mounts = {}
    for volume in service.get("volumes") or []:
        source, target = (
            (volume["source"], volume["target"]) if isinstance(volume, dict) else volume.split(":")[:2]
        )
        if source.startswith((".", "/")):
            mounts[target] = source
    return mounts


def promql_metrics(expr: str) -> set[str]:
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # label values
    expr = re.sub(
        r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr
    )  # label lists
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)  # matchers, ranges
    names = set()
    for m in re.finditer(r"(?<![\w.$])([a-zA-Z_:][\w:]*)(\s*\()?", expr):
        if m.group(2) is None and m.group(1).lower() not in PROMQL_WORDS:
            names.add(m.group(1))
    return names


def base_metric(name: str) -> str:
    for suffix in ("_bucket", "_sum", "_count", "_created"):
        if name.endswith(suffix) and name.removesuffix(suffix) in KNOWN_METRICS:
            return name.removesuffix(suffix)
    return name


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def exec_form(args: str) -> list[str]:
    return json.loads(args) if args.startswith("[") else ["/bin/sh", "-c", args]


# --- docker-compose ----------------------------------------------------------------------------------


def test_compose_has_the_four_services(services: dict) -> None:
    assert {"app", "db", "prometheus", "grafana"} <= set(services)


def test_app_database_url_points_at_the_db_service(services: dict) -> None:
    url = urlsplit(env_of(services["app"])["CAPPLAN_DATABASE_URL"])
    db_env = env_of(services["db"])
    assert url.scheme == "postgresql+psycopg"
    assert url.hostname == "db"
    assert url.port == int(db_env.get("PGPORT", 5432))
    assert url.username == db_env["POSTGRES_USER"]
    assert url.password == db_env["POSTGRES_PASSWORD"]
    assert url.path.lstrip("/") == db_env.get("POSTGRES_DB", db_env["POSTGRES_USER"])


def test_app_env_names_are_settings_fields(services: dict) -> None:
    env = env_of(services["app"])
    assert env["CAPPLAN_API_TOKEN"].startswith("${CAPPLAN_API_TOKEN"), "take the token from the environment"
    fields = set(Settings.model_fields)
    for key in env:
        assert key.startswith("CAPPLAN_") and key.removeprefix("CAPPLAN_").lower() in fields, key


def test_app_waits_for_a_healthy_db(services: dict) -> None:
    assert services["app"]["depends_on"]["db"]["condition"] == "service_healthy"
    test = services["db"]["healthcheck"]["test"]
    assert "pg_isready" in (test if isinstance(test, str) else " ".join(test))


def test_images_are_pinned(services: dict) -> None:
    for name, service in services.items():
        image = service.get("image")
        if image is None:
            assert "build" in service, f"{name}: neither image nor build"
            continue
        if "@sha256:" in image:
            continue
        last = image.rsplit("/", 1)[-1]
        assert ":" in last, f"{name}: image {image!r} has no tag"
        tag = last.rsplit(":", 1)[1]
        assert tag and tag != "latest" and "$" not in tag, f"{name}: image {image!r} is not pinned"


def test_published_ports_are_unique(services: dict) -> None:
    published = [host for s in services.values() for host, _ in port_mappings(s)]
    assert len(published) == len(set(published)), published


def test_bind_mounted_files_exist(services: dict) -> None:
    for name, service in services.items():
        for source in bind_mounts(service).values():
            assert (ROOT / source).exists(), f"{name}: {source} missing"


def test_named_volumes_are_declared(compose: dict) -> None:
    declared = set(compose.get("volumes") or {})
    for name, service in compose["services"].items():
        for volume in service.get("volumes") or []:
            source = volume["source"] if isinstance(volume, dict) else volume.split(":")[0]
            if not source.startswith((".", "/")):
                assert source in declared, f"{name}: volume {source} not declared"


# --- Prometheus --------------------------------------------------------------------------------------


def test_prometheus_mounts_our_config(services: dict) -> None:
    mounts = bind_mounts(services["prometheus"])
    assert Path(mounts["/etc/prometheus/prometheus.yml"]) == PROMETHEUS_YML.relative_to(ROOT)


def test_prometheus_scrapes_the_app_container_port(services: dict) -> None:
    config = load_yaml(PROMETHEUS_YML)
    targets = [t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    app_container_ports = {container for _, container in port_mappings(services["app"])}
    assert any(t.split(":")[0] == "app" for t in targets), targets
    for target in targets:
        host, port = target.split(":")
        assert host in services, f"{target}: no service {host!r}"
        if host == "app":
            assert port in app_container_ports, f"{target}: app listens on {app_container_ports}"
    job = next(
        j
        for j in config["scrape_configs"]
        if any("app:" in t for sc in j["static_configs"] for t in sc["targets"])
    )
    assert job.get("metrics_path", "/metrics") == "/metrics"


# --- Grafana -----------------------------------------------------------------------------------------


def test_grafana_provisioning_is_mounted_and_consistent(services: dict) -> None:
    mounts = bind_mounts(services["grafana"])
    provisioning = ROOT / mounts["/etc/grafana/provisioning"]
    assert provisioning == GRAFANA / "provisioning"

    datasources = load_yaml(provisioning / "datasources" / "prometheus.yml")["datasources"]
    (prom,) = [d for d in datasources if d["type"] == "prometheus"]
    url = urlsplit(prom["url"])
    assert url.hostname == "prometheus" and url.hostname in services
    assert str(url.port) in {c for _, c in port_mappings(services["prometheus"])}

    providers = load_yaml(provisioning / "dashboards" / "dashboards.yml")["providers"]
    dashboard_dirs = {p["options"]["path"] for p in providers}
    assert dashboard_dirs <= set(mounts), f"provider path(s) {dashboard_dirs} not mounted"
    for container_path in dashboard_dirs:
        assert (ROOT / mounts[container_path] / DASHBOARD.name).is_file()


def test_dashboard_queries_only_known_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    ds_uids = {
        d["uid"] for d in load_yaml(GRAFANA / "provisioning/datasources/prometheus.yml")["datasources"]
    }
    exprs = []
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] in ds_uids, panel["title"]
        exprs += [t["expr"] for t in panel["targets"]]
    used = {base_metric(m) for expr in exprs for m in promql_metrics(expr)}
    assert used <= KNOWN_METRICS, f"unknown metrics: {sorted(used - KNOWN_METRICS)}"
    # The panels the dashboard is for.
    assert {"http_requests_total", "http_request_duration_seconds"} <= used
    assert {"capplan_estimates_total", "capplan_catalog_entries"} <= used
    assert any('status=~"5' in e for e in exprs), "no 5xx panel"


def test_dashboard_capplan_metrics_exist_in_the_app() -> None:
    source = (ROOT / "app" / "metrics.py").read_text(encoding="utf-8")
    dashboard = DASHBOARD.read_text(encoding="utf-8")
    for name in sorted(set(re.findall(r"\bcapplan_[a-z_]+?(?=_bucket\b|_sum\b|_count\b|\{|\b)", dashboard))):
        assert f'"{name}"' in source, f"dashboard queries {name}, app/metrics.py does not define it"


@pytest.mark.parametrize(
    ("expr", "metrics"),
    [
        (
            'sum by (handler) (rate(http_requests_total{job="x", status=~"5.."}[$__rate_interval]))',
            {"http_requests_total"},
        ),
        ("histogram_quantile(0.95, sum by (le) (rate(a_bucket[5m]))) / on (job) b", {"a_bucket", "b"}),
        ("max by (kind) (capplan_catalog_entries)", {"capplan_catalog_entries"}),
    ],
)
def test_promql_metric_extraction(expr: str, metrics: set[str]) -> None:
    assert promql_metrics(expr) == metrics


# --- Dockerfile --------------------------------------------------------------------------------------


def test_dockerfile_base_image_and_user() -> None:
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    users = [args for word, args in instructions if word == "USER"]
    assert users and users[-1] not in {"root", "0"}, "run as a non-root user"


def test_dockerfile_port_matches_compose_and_serve(services: dict) -> None:
    instructions = dockerfile_instructions()
    exposed = {p.split("/")[0] for word, args in instructions if word == "EXPOSE" for p in args.split()}
    assert {c for _, c in port_mappings(services["app"])} <= exposed

    cmd = next(exec_form(args) for word, args in reversed(instructions) if word == "CMD")
    serve = cmd[cmd.index("serve") :]
    assert cmd[cmd.index("serve") - 1] == "capplan"
    assert serve[serve.index("--port") + 1] in exposed
    assert serve[serve.index("--host") + 1] == "0.0.0.0"

    healthcheck = next(args for word, args in instructions if word == "HEALTHCHECK")
    assert re.search(rf":({'|'.join(exposed)})/healthz\b", healthcheck), healthcheck
    assert "curl" not in healthcheck and "wget" not in healthcheck  # not in python:3.11-slim


def test_dockerfile_migrates_before_serving() -> None:
    instructions = dockerfile_instructions()
    entrypoint = next(exec_form(args) for word, args in reversed(instructions) if word == "ENTRYPOINT")
    cmd = next(exec_form(args) for word, args in reversed(instructions) if word == "CMD")
    script = " ".join(entrypoint + cmd)
    assert "capplan db upgrade &&" in script
    assert script.index("capplan db upgrade") < script.index("capplan serve")
    assert 'exec "$@"' in script, "the server must be PID 1's exec, not a child of sh"


def test_dockerfile_ships_what_settings_resolves_next_to_the_package() -> None:
    """app/settings.py's REPO_ROOT is app/..; templates, static, data and alembic must sit beside app/."""
    copies = [args.split() for word, args in dockerfile_instructions() if word == "COPY"]
    copied = {src.rstrip("/") for args in copies for src in args[:-1] if not src.startswith("--")}
    assert {"app", "alembic", "data", "templates", "static", "pyproject.toml"} <= copied
    installs = " ".join(args for word, args in dockerfile_instructions() if word == "RUN")
    assert re.search(r"pip install -c constraints\.txt -e \.", installs)
    assert "if [ -f constraints.txt ]" in installs, "a missing constraints.txt must not break the build"
