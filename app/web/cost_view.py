"""The cost of a run as the pages show it and the planner exports it: one :class:`CostSummary` (cash and amortised
dollars side by side, $ per million tokens, days after failures, rankings that name their basis and report ties)
rendered as sentences, as the cost table's CSV/JSON, and as the scenario comparison's rows.

Every figure comes from the cost model through the pipeline (:mod:`app.services.scenario`); nothing here
computes a cost, it only says which figure is which.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from app.deps import get_catalog, get_session
from app.domain.catalog import Catalog
from app.domain.cost.inputs import TERM_YEARS, CostOption
from app.domain.cost.summary import CostSummary, OptionSummary, RankingSummary
from app.schemas import CostRequest
from app.services.cost import run_cost
from app.services.errors import InputError
from app.services.scenario import buyer_cost
from app.web.share import planner_form
from app.web.templating import fmt_usd

router = APIRouter(include_in_schema=False)
CatalogDep = Annotated[Catalog, Depends(get_catalog)]


def outlay_reason(o: OptionSummary) -> str:
    """Why an option pays out more than this run's share."""
    if o.option in TERM_YEARS:
        return f"the whole {TERM_YEARS[o.option] * 12}-month commitment is paid whatever the run uses"
    if o.option is CostOption.reserved_spot_mix:
        return "the reserved instances' whole 12-month commitment is paid"
    if o.option is CostOption.self_build:
        return "the hardware is bought up front; the amortised figure assumes it keeps working after the run"
    return "paid out beyond this run"


def _times(cash: float, amortised: float) -> str:
    ratio = cash / amortised if amortised > 0 else float("inf")
    return f"{ratio:,.0f}×" if ratio >= 10 else f"{ratio:,.1f}×"


@dataclass(frozen=True)
class RankingLine:
    """One 'cheapest'/'fastest' statement: its basis in words, the winner (or the tie) and the figures."""

    key: str
    basis: str
    text: str
    detail: str
    tie: bool


def _names(r: RankingSummary) -> tuple[str, ...]:
    return (r.winner,) if r.winner else r.tied


def ranking_lines(summary: CostSummary) -> list[RankingLine]:
    """The amortised and cash winners with both figures (a winner whose cash outlay dwarfs its share says so),
    and the fastest; a tie names every tied option and no winner."""
    lines: list[RankingLine] = []
    for key, r, basis in (
        ("amortised", summary.cheapest_amortised, "Cheapest, amortised basis (this run's share)"),
        ("cash", summary.cheapest_cash, "Cheapest, cash basis (what is paid out for this run)"),
    ):
        parts = []
        for name in _names(r):
            o = summary.option(name)
            if o is None or o.cash_usd is None or o.amortised_usd is None:
                continue
            figure = o.amortised_usd if key == "amortised" else o.cash_usd
            text = f"{name}: {fmt_usd(figure)} {key}"
            if key == "amortised" and o.outlay_exceeds_run:
                text += (f", but a cash outlay of {fmt_usd(o.cash_usd)} ({_times(o.cash_usd, o.amortised_usd)} as "
                         f"much: {outlay_reason(o)})")  # fmt: skip
            elif key == "cash" and o.outlay_exceeds_run:
                text += f" (amortised {fmt_usd(o.amortised_usd)})"
            parts.append(text)
        lines.append(RankingLine(key, basis, r.text, "; ".join(parts), tie=bool(r.tied)))
    fast = summary.fastest
    timed = [(o.label, f"{o.days + o.lead_time_days:,.1f}") for n in _names(fast)
             if (o := summary.option(n)) is not None and o.days is not None]  # fmt: skip
    if len({d for _, d in timed}) == 1 and len(timed) > 1:
        detail = f"{timed[0][1]} days each"
    else:
        detail = "; ".join(f"{name}: {d} days" for name, d in timed)
    text = ranking_text(fast, named=len(fast.tied))
    lines.append(RankingLine("fastest", "Fastest (days after failures)", text, detail, tie=bool(fast.tied)))
    return lines


TIE_NAMED = 4
"""A tie of more options than this is written as a count and a list, not as 'a = b = …'."""


def ranking_text(r: RankingSummary, named: int = TIE_NAMED) -> str:
    """'self-build', 'tie: a = b', or for a tie of many 'tie between 16 options: a, b, c, …' (``named`` of them)."""
    if len(r.tied) <= TIE_NAMED:
        return r.text
    shown = ", ".join(r.tied[:named]) + (", …" if named < len(r.tied) else "")
    return f"tie between {len(r.tied)} options: {shown}"


def aws_and_self_build(summary: CostSummary) -> list[OptionSummary]:
    return [o for o in summary.options if o.provider == "aws"]


# -- the cost table's CSV and JSON ------------------------------------------------------------------------------

COST_COLUMNS = (
    "provider", "instance", "option", "available", "days", "days_before_failures", "cash_usd", "amortised_usd",
    "beyond_run_usd", "usd_per_m_tokens_amortised", "usd_per_m_tokens_cash", "usd_per_gpu_hour", "goodput",
    "cheapest_cash", "cheapest_amortised", "fastest", "instances", "region", "prices_as_of", "price_confidence",
    "reason", "notes",
)  # fmt: skip
"""The cost table's export columns. ``days``: wall-clock days after failures (goodput); ``cash_usd``: paid out for
the run (whole commitment terms, self-build capex); ``amortised_usd``: the run's share; $ per million tokens on
both bases; ``cheapest_*`` / ``fastest``: ``winner``, ``tie`` or empty."""


def _standing(r: RankingSummary, label: str) -> str:
    if r.winner == label:
        return "winner"
    return "tie" if label in r.tied else ""


def cost_rows(summary: CostSummary) -> list[dict[str, Any]]:
    rows = []
    for o in summary.options:
        row = o.model_dump(mode="json")
        row.update({
            "option": o.option.value, "notes": "; ".join(o.notes), "region": summary.region,
            "prices_as_of": summary.prices_as_of.isoformat(), "cheapest_cash": _standing(summary.cheapest_cash, o.label),
            "cheapest_amortised": _standing(summary.cheapest_amortised, o.label),
            "fastest": _standing(summary.fastest, o.label),
        })  # fmt: skip
        rows.append({k: row.get(k) for k in COST_COLUMNS})
    return rows


def _csv_cell(value: Any) -> Any:
    """Plain values; text that a spreadsheet would run as a formula is quoted with a leading apostrophe."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@"):
        return "'" + value
    return "" if value is None else value


def cost_csv(summary: CostSummary) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COST_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in cost_rows(summary):
        writer.writerow({k: _csv_cell(v) for k, v in row.items()})
    return out.getvalue()


@router.get("/planner/cost")
def planner_cost_export(
    request: Request,
    catalog: CatalogDep,
    session: Annotated[Session, Depends(get_session)],
    fmt: Annotated[str, Query(alias="format", pattern="^(csv|json)$")] = "csv",
) -> Response:
    """The planner's cost table for the URL's inputs, as CSV or JSON (every option, AWS and other clouds, cash and
    amortised, with the rankings, the prices' day and region, and every figure the cost used). A stored config.json
    named by id in the link (``config=``) is read back as the planner reads it."""
    params = {k: v for k, v in request.query_params.items() if k != "format"}
    form = planner_form(session, params)
    if not form.ok or form.request is None:
        raise InputError(
            [{"loc": ["query", k], "msg": m, "type": "value_error"} for k, m in form.errors.items()]
        )
    body = form.request.model_dump(exclude={"tokens"})
    summary = buyer_cost(run_cost(catalog, CostRequest(**body, tokens=form.tokens, overrides=form.overrides)))
    if fmt == "json":
        doc = {
            "planner_url": "/?" + form.query(),
            "columns": list(COST_COLUMNS),
            **summary.model_dump(mode="json"),
        }
        return Response(
            content=json.dumps(doc, indent=2), media_type="application/json",
            headers={"Content-Disposition": 'attachment; filename="cost.json"'},
        )  # fmt: skip
    return Response(
        content=cost_csv(summary), media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": 'attachment; filename="cost.csv"'},
    )  # fmt: skip


# -- the scenario comparison ---------------------------------------------------------------------------------

COMPARE_OPTIONS = tuple(CostOption)
"""The pricing options compared side by side (AWS and self-build); other clouds are in each planner's table."""


@dataclass(frozen=True)
class CompareCell:
    text: str
    value: float | None = None
    best: bool = False
    delta: str = ""


@dataclass(frozen=True)
class CompareRow:
    """One figure across the scenarios: ``differs`` when the scenarios do not all show the same text; ``best`` marks
    the lowest value(s) when lower is better; ``delta`` is the change against the first scenario."""

    label: str
    cells: tuple[CompareCell, ...]
    differs: bool
    group: str = ""


def compare_row(
    label: str, texts: Sequence[str], values: Sequence[float | None] | None = None, *,
    better: Literal["lower", "higher"] | None = None, group: str = "",
) -> CompareRow:  # fmt: skip
    """``better``: which way the best value lies (None: no best, e.g. a layout); ties are all best."""
    values = list(values) if values is not None else [None] * len(texts)
    known = [v for v in values if v is not None]
    differs = len(set(texts)) > 1
    best = None
    if known and better and differs:
        best = min(known) if better == "lower" else max(known)
    first = values[0] if values else None
    cells = []
    for i, (text, value) in enumerate(zip(texts, values, strict=True)):
        delta = ""
        if i and differs and value is not None and first:
            change = (value - first) / abs(first)
            delta = "same" if abs(change) < 0.0005 else f"{change:+.1%}"
        is_best = best is not None and value is not None and abs(value - best) <= 1e-4 * abs(best) + 1e-9
        cells.append(CompareCell(text, value, is_best, delta))
    return CompareRow(label, tuple(cells), differs, group)


def _fmt_days(d: float | None) -> str:
    return "—" if d is None else f"{d:,.1f} days"


def _fmt_per_m(v: float | None) -> str:
    return "—" if v is None else f"${v:,.2f}"


def compare_cost_rows(summaries: Sequence[CostSummary | None]) -> list[CompareRow]:
    """Per pricing option (AWS and self-build): days after failures, cash $, amortised $ and $ per million tokens
    (amortised) of each scenario; then the cheapest on each basis and the fastest, ties as ties."""
    rows: list[CompareRow] = []
    for option in COMPARE_OPTIONS:
        found = [next((o for o in s.options if o.provider == "aws" and o.option is option), None) if s else None
                 for s in summaries]  # fmt: skip
        if not any(o is not None and o.available for o in found):
            continue
        for label, attr, fmt in (
            ("days after failures", "days", _fmt_days),
            ("cash $ (paid out)", "cash_usd", fmt_usd),
            ("amortised $ (this run's share)", "amortised_usd", fmt_usd),
            ("$ / M tokens (amortised)", "usd_per_m_tokens_amortised", _fmt_per_m),
        ):
            values = [getattr(o, attr) if o is not None and o.available else None for o in found]
            texts = [
                fmt(v) if v is not None else ("n/a" if o is not None else "—")
                for o, v in zip(found, values, strict=True)
            ]
            rows.append(compare_row(label, texts, values, better="lower", group=option.value))
    for label, attr in (("cheapest, amortised basis", "cheapest_amortised"), ("cheapest, cash basis", "cheapest_cash"),
                        ("fastest", "fastest")):  # fmt: skip
        rows.append(
            compare_row(
                label, [ranking_text(getattr(s, attr)) if s else "—" for s in summaries], group="rankings"
            )
        )
    rows.append(compare_row("prices", [f"{s.region}, in force on {s.prices_as_of}" if s else "—" for s in summaries],
                            group="rankings"))  # fmt: skip
    return rows
