"""The Jinja environment (autoescape, strict undefined) and the unit/money filters templates use."""

from __future__ import annotations

from typing import Any

from jinja2 import StrictUndefined
from jinja2_fragments.fastapi import Jinja2Blocks

from app.domain.estimator.plan import folded_text
from app.settings import REPO_ROOT
from app.web.charts import describe_chart
from app.web.glossary import field_title

GIB = 1024**3


def fmt_number(value: Any, digits: int = 3) -> str:
    """Compact human formatting: thousands separators for big numbers, `digits` significant digits."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}"
    if isinstance(value, list | tuple):
        return ", ".join(fmt_number(v, digits) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {fmt_number(v, digits)}" for k, v in value.items())
    return str(value)


def fmt_gib(value_bytes: float | None) -> str:
    return "—" if value_bytes is None else f"{value_bytes / GIB:,.1f} GiB"


def fmt_usd(value: float | None) -> str:
    if value is None:
        return "—"
    return f"${value:,.0f}" if abs(value) >= 100 else f"${value:,.2f}"


def plan_degrees(plan: Any) -> str:
    """Every parallel degree of a plan, so that they multiply to the GPU count: tp · pp (· vpp) · cp · ep · dp."""
    vpp = f" · vpp {plan.vpp}" if plan.vpp > 1 else ""
    folded = folded_text(plan.tp, getattr(plan, "expert_tp", None))
    return f"tp {plan.tp} · pp {plan.pp}{vpp} · cp {plan.cp} · ep {plan.ep}{folded} · dp {plan.dp}"


def build_templates() -> Jinja2Blocks:
    templates = Jinja2Blocks(directory=str(REPO_ROOT / "templates"))
    env = templates.env
    env.undefined = StrictUndefined
    env.globals["gloss"] = field_title
    env.globals["describe_chart"] = describe_chart
    env.trim_blocks = True
    env.lstrip_blocks = True
    env.filters["num"] = fmt_number
    env.filters["gib"] = fmt_gib
    env.filters["usd"] = fmt_usd
    env.filters["degrees"] = plan_degrees
    return templates
