"""`capplan catalog …` and start-up failure on a malformed catalog: one clear line, exit code 2."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import main
from app.settings import REPO_ROOT


def run_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *args: str
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["capplan", *args])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def broken_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    data = tmp_path / "data"
    shutil.copytree(REPO_ROOT / "data", data)
    text = (data / "accelerators.toml").read_text()
    # Make the first bf16 figure a string: a type error in a known place.
    start = text.index("bf16_dense_tflops")
    end = text.index("\n", start)
    (data / "accelerators.toml").write_text(text[:start] + 'bf16_dense_tflops = "fast"' + text[end:])
    monkeypatch.setenv("CAPPLAN_DATA_DIR", str(data))
    return data


def test_catalog_list_table(monkeypatch, capsys) -> None:
    code, out, _ = run_cli(monkeypatch, capsys, "catalog", "list", "accelerators")
    assert code == 0
    assert out.splitlines()[0].split()[:2] == ["slug", "name"]
    assert "h100-sxm" in out and "gb200" in out


def test_catalog_list_json_has_provenance(monkeypatch, capsys) -> None:
    code, out, _ = run_cli(monkeypatch, capsys, "catalog", "list", "prices", "--json")
    assert code == 0
    body = json.loads(out)
    assert body["kind"] == "prices"
    p5 = next(e for e in body["entries"] if e["slug"] == "p5.48xlarge")
    assert all(f["source"] and f["as_of"] for f in p5["figures"].values())


@pytest.mark.parametrize("kind", ["accelerators", "nodes", "fabrics", "prices", "architectures"])
def test_catalog_list_every_kind(monkeypatch, capsys, kind: str) -> None:
    code, out, _ = run_cli(monkeypatch, capsys, "catalog", "list", kind, "--json")
    assert code == 0 and json.loads(out)["count"] > 0


def test_unknown_kind_exits_2(monkeypatch, capsys) -> None:
    code, _, err = run_cli(monkeypatch, capsys, "catalog", "list", "gizmos")
    assert code == 2
    assert "gizmos" in err


def test_unknown_slug_exits_2_listing_known(monkeypatch, capsys) -> None:
    code, _, err = run_cli(monkeypatch, capsys, "catalog", "show", "accelerators", "h900")
    assert code == 2
    assert "h900" in err and "h100-sxm" in err
    assert "Traceback" not in err


def test_malformed_catalog_names_file_and_key(monkeypatch, capsys, broken_data_dir: Path) -> None:
    code, _, err = run_cli(monkeypatch, capsys, "catalog", "list", "accelerators")
    assert code == 2
    assert "accelerators.toml" in err and "bf16_dense_tflops" in err
    assert "Traceback" not in err


def test_app_refuses_to_start_on_malformed_catalog(broken_data_dir: Path, sqlite_url: str) -> None:
    from app.domain.catalog import CatalogError
    from app.main import create_app
    from app.settings import Settings

    with pytest.raises(CatalogError) as info:
        create_app(Settings(database_url=sqlite_url, data_dir=broken_data_dir))
    assert info.value.path.endswith("accelerators.toml")
    assert "bf16_dense_tflops" in info.value.key


def test_console_script_db_upgrade(tmp_path: Path) -> None:
    """The installed `capplan` entry point migrates a fresh SQLite file."""
    exe = Path(sys.executable).parent / "capplan"
    env = {"CAPPLAN_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([str(exe), "db", "upgrade"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "cli.db").exists()
