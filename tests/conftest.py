"""Shared fixtures: settings on a temporary SQLite file, an app and a client per test, backends for DB tests."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.exc import OperationalError

from app.db.migrate import upgrade
from app.settings import REPO_ROOT, Settings

DATA_DIR = REPO_ROOT / "data"
IN_CI = os.environ.get("CI", "").lower() == "true"


def postgres_url() -> str | None:
    """The PostgreSQL test URL; in CI it must be set and reachable (tests fail rather than skip)."""
    url = os.environ.get("CAPPLAN_TEST_POSTGRES_URL")
    if not url:
        if IN_CI:
            pytest.fail("CI=true but CAPPLAN_TEST_POSTGRES_URL is not set (.ci/run sets it)")
        pytest.skip("PostgreSQL tests need CAPPLAN_TEST_POSTGRES_URL (set by .ci/run)")
    try:
        engine = create_engine(url)
        with engine.connect() as conn:
            conn.execute(text("select 1"))
        engine.dispose()
    except OperationalError as exc:
        pytest.fail(f"CAPPLAN_TEST_POSTGRES_URL is set but the server is unreachable: {exc}")
    return url


def worker_postgres_url(url: str, worker_id: str) -> str:
    """One database per xdist worker (capplan_test_gw0, …), created on first use, so workers never collide."""
    if worker_id in ("master", ""):
        return url
    base = make_url(url)
    name = f"{base.database}_{worker_id}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        exists = conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).scalar()
        if not exists:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return base.set(database=name).render_as_string(hide_password=False)


def reset_postgres(url: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'test.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path, worker_id: str) -> str:
    """Each DB test runs on SQLite and on PostgreSQL (fresh schema)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'test.db'}"
    url = postgres_url()
    assert url is not None
    url = worker_postgres_url(url, worker_id)
    reset_postgres(url)
    return url


@pytest.fixture(scope="session", autouse=True)
def data_without_shipped_calibration(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """data/ as committed minus data/calibration, for every test (CAPPLAN_DATA_DIR and ``settings``): tests check
    behaviour, so the GPU runs shipped later must not move the figures they assert. Tests of shipped calibration
    bring their own runs; tests/api/test_shipped_calibration.py also validates the committed ones."""
    target = tmp_path_factory.mktemp("catalog") / "data"
    shutil.copytree(DATA_DIR, target, ignore=shutil.ignore_patterns("calibration"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CAPPLAN_DATA_DIR", str(target))
        yield target


@pytest.fixture
def settings(sqlite_url: str, data_without_shipped_calibration: Path) -> Settings:
    return Settings(
        database_url=sqlite_url, data_dir=data_without_shipped_calibration, api_token="test-token",
        log_level="WARNING",
    )  # fmt: skip


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    from app.main import create_app

    upgrade(settings.database_url)
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.fixture(scope="session")
def catalog_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CLI's catalog cache (app/cli/catalog_cache.py) for the whole suite: a folder of the session's own,
    never the user's ~/.cache; one folder, so most commands read the cached catalog as a user's would."""
    return tmp_path_factory.mktemp("catalog-cache")


@pytest.fixture(autouse=True)
def _catalog_cache(catalog_cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPPLAN_CATALOG_CACHE", str(catalog_cache_dir))


@pytest.fixture(scope="session")
def hub_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Hugging Face hub cache every test sees (app/services/hub_cache.py): empty unless a test fills it,
    never the user's ~/.cache/huggingface."""
    return tmp_path_factory.mktemp("hf-hub")


@pytest.fixture(autouse=True)
def _hub_cache(hub_cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache_dir))


HUB_LLAMA_CONFIG = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "hidden_act": "silu",
}  # fmt: skip
"""A Llama 3.1 8B-shaped config.json (8.0 B parameters) for the Hugging Face cache tests."""


class FakeHub:
    """A Hugging Face hub cache laid out as huggingface_hub writes it: refs/<ref> holds the commit, the
    snapshot's config.json links into blobs/."""

    llama = HUB_LLAMA_CONFIG

    def __init__(self, root: Path) -> None:
        self.root = root

    def add(self, repo_id: str, config: dict | None = None, *, commit: str = "3f1b2c4d5e6f7a8b9c0d",
            ref: str | None = "main") -> Path:  # fmt: skip
        org, name = repo_id.split("/")
        repo = self.root / f"models--{org}--{name}"
        blob = repo / "blobs" / f"blob-{commit}"
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_text(json.dumps(HUB_LLAMA_CONFIG if config is None else config))
        snapshot = repo / "snapshots" / commit
        snapshot.mkdir(parents=True, exist_ok=True)
        (snapshot / "config.json").symlink_to(Path("..") / ".." / "blobs" / blob.name)
        if ref is not None:
            (repo / "refs").mkdir(exist_ok=True)
            (repo / "refs" / ref).write_text(commit)
        return snapshot / "config.json"


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    """An empty Hugging Face cache of this test's own (HF_HUB_CACHE); ``hub_cache.add("org/name")`` fills it."""
    root = tmp_path / "hf-hub"
    root.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    return FakeHub(root)
