"""Vendored front-end files: checksums, licences, and no CDN anywhere.

static/vendor/manifest.toml is written by scripts/vendor_update.sh. These tests need neither npm nor
a network: they re-hash the committed files against the manifest, and scan templates/ and static/ for
script, stylesheet or src URLs that would reach the internet (the app must work offline).
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "static"
VENDOR = STATIC / "vendor"
TEMPLATES = ROOT / "templates"
MANIFEST = VENDOR / "manifest.toml"

LICENCE_NAMES = ("LICENSE", "LICENCE", "COPYING")


def manifest_packages() -> list[dict]:
    return tomllib.loads(MANIFEST.read_text(encoding="utf-8"))["package"]


PACKAGES = manifest_packages()
FILES = [(pkg["dir"], f) for pkg in PACKAGES for f in pkg["file"]]


def test_manifest_lists_the_pinned_packages() -> None:
    pins = {pkg["name"]: pkg["version"] for pkg in PACKAGES}
    assert pins == {"htmx.org": "4.0.1", "echarts": "6.1.0"}
    for pkg in PACKAGES:
        assert pkg["dir"] == f"{pkg['name']}@{pkg['version']}"
        assert pkg["tarball"].endswith(f"-{pkg['version']}.tgz")
        assert re.fullmatch(r"sha512-[A-Za-z0-9+/]{86}==", pkg["integrity"]), pkg["integrity"]
        assert pkg["license"] in {"0BSD", "Apache-2.0", "MIT", "ISC", "BSD-3-Clause"}, pkg["license"]


@pytest.mark.parametrize(("pkg_dir", "entry"), FILES, ids=[f"{d}/{f['path']}" for d, f in FILES])
def test_vendored_file_matches_manifest(pkg_dir: str, entry: dict) -> None:
    path = VENDOR / pkg_dir / entry["path"]
    assert path.is_file(), f"{path.relative_to(ROOT)} is in the manifest but missing"
    data = path.read_bytes()
    assert len(data) == entry["bytes"], f"{path.relative_to(ROOT)}: size changed"
    assert hashlib.sha256(data).hexdigest() == entry["sha256"], (
        f"{path.relative_to(ROOT)}: sha256 differs from manifest; re-run scripts/vendor_update.sh"
    )


def test_every_vendored_file_is_in_the_manifest() -> None:
    listed = {VENDOR / d / f["path"] for d, f in FILES}
    on_disk = {p for p in VENDOR.rglob("*") if p.is_file() and p != MANIFEST}
    assert sorted(str(p.relative_to(ROOT)) for p in on_disk - listed) == []


@pytest.mark.parametrize("pkg", PACKAGES, ids=[p["dir"] for p in PACKAGES])
def test_each_package_ships_its_licence(pkg: dict) -> None:
    pkg_dir = VENDOR / pkg["dir"]
    licences = [p for p in pkg_dir.iterdir() if p.is_file() and p.name.upper().startswith(LICENCE_NAMES)]
    assert licences, f"{pkg['dir']} has no LICENSE file"
    assert any(f["role"] == "licence" and f["path"] in {p.name for p in licences} for f in pkg["file"])
    if pkg["license"] == "Apache-2.0":  # Apache-2.0 §4(d): the NOTICE travels with the work
        assert (pkg_dir / "NOTICE").is_file(), f"{pkg['dir']}: Apache-2.0 package without NOTICE"


def test_each_package_has_a_runtime_file() -> None:
    for pkg in PACKAGES:
        assert [f for f in pkg["file"] if f["role"] == "runtime"], pkg["dir"]


# --- no CDN ------------------------------------------------------------------------------------------

# An external URL: http://, https:// or protocol-relative //host.
_EXT = r"""(?:https?:)?//[^\s"'<>)]"""
EXTERNAL_REF = [
    # <script src=…>, <img src=…>, <iframe src=…>, <source src=…>, srcset=…
    re.compile(rf"""\b(?:src|srcset)\s*=\s*["']?\s*{_EXT}""", re.I),
    # <link rel=stylesheet|preload|modulepreload|icon href=…>
    re.compile(rf"""<link\b[^>]*?\bhref\s*=\s*["']?\s*{_EXT}""", re.I | re.S),
    # CSS: @import "…" / @import url(…) / url(…)
    re.compile(rf"""@import\s+(?:url\(\s*)?["']?\s*{_EXT}""", re.I),
    re.compile(rf"""\burl\(\s*["']?\s*{_EXT}""", re.I),
    # JS: import … from "https://…", import("https://…"), importScripts(…), new Worker(…)
    re.compile(rf"""\bimport\b[^;\n]*?["']{_EXT}""", re.I),
    re.compile(rf"""\b(?:importScripts|Worker|SharedWorker)\s*\(\s*["']{_EXT}""", re.I),
]
COMMENTS = [
    re.compile(r"<!--.*?-->", re.S),  # HTML
    re.compile(r"\{#.*?#\}", re.S),  # Jinja
    re.compile(r"/\*.*?\*/", re.S),  # CSS / JS block
    re.compile(r"^\s*//.*$", re.M),  # JS line comment on its own line (not "https://" inside strings)
]
TEXT_SUFFIXES = {".html", ".htm", ".jinja", ".jinja2", ".j2", ".js", ".mjs", ".css", ".svg", ".xml"}


def strip_comments(text: str) -> str:
    for pattern in COMMENTS:
        text = pattern.sub(" ", text)
    return text


def external_refs(text: str) -> list[str]:
    text = strip_comments(text)
    return [m.group(0) for pattern in EXTERNAL_REF for m in pattern.finditer(text)]


def scanned_files() -> list[Path]:
    """Our templates and static files; vendor files and licence texts are not ours to police."""
    files = []
    for base in (TEMPLATES, STATIC):
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if not path.is_file() or path.suffix.lower() not in TEXT_SUFFIXES:
                continue
            if VENDOR in path.parents or path.name.upper().startswith((*LICENCE_NAMES, "NOTICE")):
                continue
            files.append(path)
    return files


@pytest.mark.parametrize(
    "snippet",
    [
        '<script src="https://unpkg.com/htmx.org@4.0.1"></script>',
        "<script defer src='//cdn.jsdelivr.net/npm/echarts'></script>",
        '<link rel="stylesheet"\n      href="https://cdn.example/pico.css">',
        '<img src=http://example.com/x.png alt="">',
        '@import url("https://fonts.googleapis.com/css2?family=Inter");',
        "body { background: url(https://example.com/bg.png) }",
        'import { x } from "https://esm.sh/x";',
    ],
)
def test_detector_flags_cdn_references(snippet: str) -> None:
    assert external_refs(snippet)


@pytest.mark.parametrize(
    "snippet",
    [
        "<script src=\"{{ url_for('static', path='vendor/htmx.org@4.0.1/htmx.min.js') }}\"></script>",
        '<a href="https://arxiv.org/abs/2407.21783">Llama 3 paper</a>',  # citing a source is fine
        '<!-- was: <script src="https://unpkg.com/htmx.org"></script> -->',
        "{# <link rel=stylesheet href=https://cdn.example/x.css> #}",
        "/* from https://echarts.apache.org/ */",
        "  // see https://htmx.org/docs/",
        '<svg xmlns="http://www.w3.org/2000/svg"></svg>',
    ],
)
def test_detector_ignores_links_and_comments(snippet: str) -> None:
    assert external_refs(snippet) == []


def test_no_cdn_references_in_templates_or_static() -> None:
    offenders = {
        str(path.relative_to(ROOT)): refs
        for path in scanned_files()
        if (refs := external_refs(path.read_text(encoding="utf-8", errors="replace")))
    }
    assert offenders == {}, "serve these from static/vendor/ instead (the app must work offline)"


VENDOR_REF = re.compile(r"""vendor/([^/"'\s]+@[^/"'\s]+)/([^"'\s)}]+)""")


def test_templates_reference_only_vendored_runtime_files() -> None:
    """Every vendor/<pkg>@<ver>/<file> a template names exists and is a runtime file of the manifest."""
    runtime = {(d, f["path"]) for d, f in FILES if f["role"] == "runtime"}
    wrong = []
    for path in sorted(TEMPLATES.rglob("*.html")) if TEMPLATES.is_dir() else []:
        for m in VENDOR_REF.finditer(strip_comments(path.read_text(encoding="utf-8"))):
            if (m.group(1), m.group(2)) not in runtime:
                wrong.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert wrong == [], "not a vendored runtime file (check the version in the path)"
