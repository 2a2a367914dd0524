"""The domain's one clock read: today's date, for figures stamped when they are made (a plan's override,
an imported architecture). Callers that need a fixed date pass it in instead."""

from __future__ import annotations

from datetime import date


def today() -> date:
    """Today's date (local time of the process)."""
    return date.today()
