"""Where calibration evidence comes from, and how it becomes :class:`~app.domain.calibration.Calibrations`.

Two sources, fitted together (oldest first, so the newest evidence wins per figure):

* **Shipped runs** — runner results measured by the project on real GPUs and committed under
  ``data/calibration/<folder>/<preset>.json`` (``capplan bench ship`` puts them there). Each file is a
  ``capplan.bench/v1`` result as ``capplan bench run --output`` writes it, so it carries its own date, GPU, driver
  and torch version. They calibrate every estimate, in the API, the pages and the CLI, out of the box.
* **Stored runs** — results users posted to ``POST /api/v1/benchmarks``; they live in the database and calibrate
  the server's estimates (the CLI reads them with ``--calibration-db``).

Stored runs have ids (``run 12``, page ``/benchmarks/12``); shipped runs are named by their path under
``data/calibration`` (``shipped 2026-12-h200/llama3_8b_fsdp1_h200``, page ``/benchmarks/shipped/<key>``). A shipped
file that does not validate stops the app at start-up, like a bad catalog file: it is our data, not user input.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, selectinload

from app.db.tables import BenchmarkRun
from app.domain.estimator.calibration import CalibrationRun, Calibrations, Sample, fit_calibrations, fit_run
from app.schemas import BenchmarkResultIn

SHIPPED_DIR = "calibration"
SHIPPED_KEY = re.compile(r"[A-Za-z0-9._-]{1,100}(/[A-Za-z0-9._-]{1,100})?")  # folder/file: safe in URLs
FILE_RUN_IDS = 2**31  # files named on the command line sort after stored runs (ids < 2**31) of the same date
MAX_SHIPPED_BYTES = 16 * 2**20

log = logging.getLogger("capplan")


class CalibrationFileError(ValueError):
    """A runner result file (shipped under data/calibration, or given with --calibration-run) that is not valid;
    the message names the file and the reason."""


@dataclass(frozen=True)
class ShippedRun:
    key: str  # path under data/calibration without ".json", e.g. "2026-12-h200/llama3_8b_fsdp1_h200"
    path: Path
    result: BenchmarkResultIn

    @property
    def label(self) -> str:
        return f"shipped {self.key}"

    @property
    def href(self) -> str:
        return f"/benchmarks/shipped/{self.key}"


def calibration_run_from(
    *,
    run_id: int,
    measured_at: datetime,
    accelerator: str | None,
    world_size: int,
    config: Mapping[str, Any] | None,
    samples: Iterable[Any],
    label: str = "",
    href: str | None = None,
    nodes: int | None = None,
) -> CalibrationRun | None:
    """One run as calibration input, from any of its shapes (stored row, API output, runner file): ``samples``
    are objects with metric, unit, rank, measured and predicted. None without a catalog accelerator (CPU runs).
    ``config`` is what the poster sent: an odd value there (a string where a count belongs) reads as unknown,
    it never fails the fit of every other run."""
    if not accelerator:
        return None
    config = config if isinstance(config, Mapping) else {}
    kind = config.get("scale_out_kind")
    return CalibrationRun(
        run_id=run_id, measured_at=measured_at.date().isoformat(), timestamp=measured_at.isoformat(),
        accelerator=accelerator, world_size=world_size,
        nodes=max(1, _count(nodes if nodes is not None else config.get("nodes"), 1)),
        scale_out_kind=kind if isinstance(kind, str) else None, communicators=_count(config.get("communicators"), 0),
        samples=tuple(Sample(s.metric, s.unit, s.rank, s.measured, s.predicted) for s in samples),
        basis=_basis(config.get("prediction_basis")), label=label, href=href,
    )  # fmt: skip


def _count(value: Any, default: int) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return max(0, value)
    if isinstance(value, float) and value.is_integer():
        return max(0, int(value))
    return default


def _basis(value: Any) -> dict[str, float]:
    """``config.prediction_basis`` of a run (the efficiencies its predictions used); {} when absent or odd."""
    if not isinstance(value, Mapping):
        return {}
    return {
        str(k): float(v) for k, v in value.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and 0 < v <= 1
    }  # fmt: skip


def shipped_calibration_run(run: ShippedRun) -> CalibrationRun | None:
    r = run.result
    return calibration_run_from(
        run_id=0, measured_at=r.measured_at, accelerator=r.accelerator, world_size=r.world_size,
        config=r.config, samples=r.metrics, label=run.label, href=run.href, nodes=r.nodes,
    )  # fmt: skip


def read_result_file(path: Path) -> BenchmarkResultIn:
    """A runner result JSON file, validated; :class:`CalibrationFileError` names the file and the reason."""
    try:
        if path.stat().st_size > MAX_SHIPPED_BYTES:
            raise CalibrationFileError(f"{path}: larger than {MAX_SHIPPED_BYTES} bytes; not a runner result")
        return BenchmarkResultIn.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise CalibrationFileError(f"{path}: {exc.strerror or exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "file"
        raise CalibrationFileError(
            f"{path}: not a capplan.bench/v1 result ({where}: {first['msg']}; {exc.error_count()} error(s))"
        ) from None


def load_shipped_runs(data_dir: Path, *, accelerators: Iterable[str] | None = None) -> tuple[ShippedRun, ...]:
    """Every ``*.json`` under ``data_dir/calibration`` (sorted by path). With ``accelerators`` (the catalog's
    slugs), a file naming an unknown accelerator is an error too."""
    root = Path(data_dir) / SHIPPED_DIR
    if not root.is_dir():
        return ()
    known = set(accelerators) if accelerators is not None else None
    out = []
    for path in sorted(root.rglob("*.json")):
        result = read_result_file(path)
        if known is not None and result.accelerator is not None and result.accelerator not in known:
            raise CalibrationFileError(f"{path}: unknown accelerator {result.accelerator!r}")
        key = path.relative_to(root).with_suffix("").as_posix()
        if not SHIPPED_KEY.fullmatch(key):
            raise CalibrationFileError(f"{path}: name it with letters, digits, '.', '_', '-' and one folder")
        shipped = ShippedRun(key=key, path=path, result=result)
        try:
            cal = shipped_calibration_run(shipped)
            if cal is not None:
                fit_run(cal)
        except (ValueError, TypeError, ArithmeticError) as exc:
            raise CalibrationFileError(f"{path}: cannot be fitted: {exc}") from None
        out.append(shipped)
    return tuple(out)


def fit_all(shipped: Sequence[ShippedRun], stored: Iterable[CalibrationRun] = ()) -> Calibrations:
    """Calibrations from the shipped runs and the stored ones (newest evidence wins per figure)."""
    runs = [c for s in shipped if (c := shipped_calibration_run(s)) is not None]
    return fit_calibrations([*runs, *stored])


def result_file_runs(
    paths: Sequence[Path], accelerators: Iterable[str] | None = None
) -> list[CalibrationRun]:
    """Runner result files given on the command line (``--calibration-run``) as calibration input, labelled by
    their file name. A file that cannot calibrate anything (a CPU run, an accelerator not in ``accelerators``)
    is an error: the user named it to calibrate. Raises :class:`CalibrationFileError`."""
    known = set(accelerators) if accelerators is not None else None
    out = []
    for i, path in enumerate(paths, start=1):
        result = read_result_file(path)
        if result.accelerator is None:
            raise CalibrationFileError(f"{path}: not run on a catalog accelerator ({result.device_name}); "
                                       "it calibrates nothing")  # fmt: skip
        if known is not None and result.accelerator not in known:
            raise CalibrationFileError(f"{path}: unknown accelerator {result.accelerator!r}")
        run = calibration_run_from(
            run_id=FILE_RUN_IDS + i, measured_at=result.measured_at, accelerator=result.accelerator,
            world_size=result.world_size, config=result.config, samples=result.metrics,
            label=f"file {path.name}", nodes=result.nodes,
        )  # fmt: skip
        if run is not None:
            out.append(run)
    return out


def stored_calibration_runs(session: Session) -> list[CalibrationRun]:
    """The runs posted to this server, as calibration input (oldest first; runs without an accelerator skipped,
    and a run whose figures cannot be read is logged and skipped)."""
    query = (
        select(BenchmarkRun)
        .where(BenchmarkRun.accelerator_slug.is_not(None))
        .options(selectinload(BenchmarkRun.samples))
        .order_by(BenchmarkRun.measured_at, BenchmarkRun.id)
    )
    out = []
    for r in session.scalars(query):
        try:
            c = stored_calibration_run(r)
            if c is not None:
                fit_run(c)  # what the fit will do with it: a run it cannot fit is left out, not fatal
                out.append(c)
        except (ValueError, TypeError, ArithmeticError) as exc:
            log.warning("benchmark run %s left out of the calibration: %s", r.id, exc)
    return out


def stored_calibration_run(run: BenchmarkRun) -> CalibrationRun | None:
    return calibration_run_from(
        run_id=run.id, measured_at=run.measured_at, accelerator=run.accelerator_slug, world_size=run.world_size,
        config=run.config, samples=run.samples, href=f"/benchmarks/{run.id}",
    )  # fmt: skip


def stored_calibration_runs_or_none(session: Session) -> list[CalibrationRun] | None:
    """:func:`stored_calibration_runs`, or None when the database cannot be read: an estimate needs no
    database, so an outage must not stop it."""
    try:
        return stored_calibration_runs(session)
    except SQLAlchemyError as exc:
        log.warning("stored calibration unavailable (database): %s", exc.__class__.__name__)
        return None


class CalibrationCache:
    """The fitted calibrations (shipped runs + stored runs), refitted at most every ``ttl_s`` seconds (and right
    after this process ingests a run), so an estimate does not read every stored run. When the database cannot
    be read, the shipped calibration still applies."""

    def __init__(
        self,
        session_factory: Callable[[], Any],
        shipped: Sequence[ShippedRun] = (),
        ttl_s: float = 10.0,
    ) -> None:
        self._factory = session_factory
        self.shipped = tuple(shipped)
        self._ttl_s = ttl_s
        self._lock = threading.Lock()
        self._shipped_only = fit_all(self.shipped)
        self._value: Calibrations = self._shipped_only
        self._loaded_at = float("-inf")

    def get(self) -> Calibrations:
        """The fitted calibrations, refitted when stale. One thread refits; the others meanwhile get the last
        value at once instead of waiting on the database."""
        if time.monotonic() - self._loaded_at < self._ttl_s:
            return self._value
        if not self._lock.acquire(blocking=False):
            return self._value
        try:
            if time.monotonic() - self._loaded_at >= self._ttl_s:
                try:
                    with self._factory() as session:
                        stored = stored_calibration_runs_or_none(session)
                    # database unreadable: the shipped calibration alone until the next try, one TTL later
                    # (an outage costs one failed connection per TTL, not one per request)
                    self._value = self._shipped_only if stored is None else fit_all(self.shipped, stored)
                except Exception:  # a bug in one run's data must not take every page down: keep the last fit
                    log.exception("calibration refit failed; keeping the previous calibration")
                self._loaded_at = time.monotonic()
        finally:
            self._lock.release()
        return self._value

    def peek(self) -> Calibrations | None:
        """The fitted calibrations while they are fresh, else None (call :meth:`get` to refit)."""
        return self._value if time.monotonic() - self._loaded_at < self._ttl_s else None

    def invalidate(self) -> None:
        self._loaded_at = float("-inf")

    def shipped_run(self, key: str) -> ShippedRun | None:
        return next((s for s in self.shipped if s.key == key), None)
