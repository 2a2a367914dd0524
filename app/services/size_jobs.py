"""Sizing runs in the background, for the page: start one, read its progress, fetch its result.

The "Size a cluster" page posts its form, gets a job id at once and polls the job's progress until the result is
there (:mod:`app.web.size`). Each job runs :func:`app.services.size.run_size` on a thread of this process, under
the server's search budget (CAPPLAN_SEARCH_CONCURRENCY slots, CAPPLAN_SEARCH_TIMEOUT_S each); jobs live in
memory, so with several worker processes a poll must reach the worker that started the job (one worker per
container, as deployed). At most ``max_running`` run at once (a further start is refused: :class:`SearchBusy`);
finished jobs are kept ``keep_s`` seconds, at most ``max_jobs`` of them.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from app.services.search import SearchBusy
from app.services.size import SizeResult, SizingProgress

log = logging.getLogger(__name__)

Runner = Callable[[Callable[[SizingProgress], None]], SizeResult]


@dataclass
class SizingJob:
    """One run: its id, what it was asked (the form's values, for the page), the latest progress, and when done
    its result or the error it ended with."""

    id: str
    values: dict[str, str]
    started: float = field(default_factory=time.monotonic)
    progress: SizingProgress | None = None
    result: SizeResult | None = None
    error: Exception | None = None
    finished: float | None = None

    @property
    def done(self) -> bool:
        return self.finished is not None


class SizingJobs:
    """The jobs of this process (thread-safe)."""

    def __init__(self, max_running: int = 4, max_jobs: int = 64, keep_s: float = 900.0) -> None:
        self.max_running, self.max_jobs, self.keep_s = max_running, max_jobs, keep_s
        self._jobs: dict[str, SizingJob] = {}
        self._lock = threading.Lock()

    def start(self, values: dict[str, str], run: Runner) -> SizingJob:
        """Start ``run(progress)`` on a thread; the job records each progress report and the outcome. Raises
        :class:`SearchBusy` when ``max_running`` jobs are already running."""
        with self._lock:
            self._forget_old()
            running = sum(1 for j in self._jobs.values() if not j.done)
            if running >= self.max_running:
                raise SearchBusy(
                    f"{running} sizing runs are already in progress on this server; retry when one has finished",
                    retry_after_s=5,
                )
            job = SizingJob(id=secrets.token_urlsafe(12), values=dict(values))
            self._jobs[job.id] = job

        def report(progress: SizingProgress) -> None:
            job.progress = progress

        def work() -> None:
            try:
                job.result = run(report)
            except Exception as exc:  # recorded for the page, which says what went wrong
                if not isinstance(exc, (SearchBusy, ValueError)):
                    log.exception("sizing job %s failed", job.id)
                job.error = exc
            finally:
                job.finished = time.monotonic()

        threading.Thread(target=work, name=f"sizing-{job.id}", daemon=True).start()
        return job

    def get(self, job_id: str) -> SizingJob | None:
        with self._lock:
            return self._jobs.get(job_id)

    def _forget_old(self) -> None:
        now = time.monotonic()
        for job_id, job in list(self._jobs.items()):
            if job.finished is not None and now - job.finished > self.keep_s:
                del self._jobs[job_id]
        finished = sorted((j for j in self._jobs.values() if j.done), key=lambda j: j.finished or 0.0)
        for job in finished[: max(0, len(self._jobs) - self.max_jobs)]:
            del self._jobs[job.id]
