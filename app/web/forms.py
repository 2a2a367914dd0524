"""The planner form: query-string values ⇄ (EstimateRequest, tokens, CostOverrides), with per-field messages.

Every input travels in the query string (GET), so a planner URL is the whole scenario and can be shared. Blank
fields mean "the default" (auto dp, the accelerator's reference node, the node's fabric, catalog figures).
Values are kept as the user typed them, so an invalid form re-renders exactly as submitted. A planner URL names
only what differs from the defaults (:func:`to_query`), and a config.json by ``config=<id>`` once it is stored
(app/web/share.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from pydantic import ValidationError

from app.domain.cost.inputs import CostOverrides
from app.schemas import EstimateRequest, load_json_text
from app.services.hub_cache import HubConfigError, parse_hub_id

HF = "hf"
"""The ``model`` value meaning "use the config.json in ``hf_config``"."""
HUB = "hub"
"""The ``model`` value meaning "the Hugging Face id in ``hf_id``, read from the server's Hugging Face cache"."""
CONFIG_REF = "config"
"""The query parameter naming a stored config.json by id (instead of ``hf_config`` with the whole file)."""

DEFAULTS: dict[str, str] = {
    "model": "llama3.1-70b",
    "hf_config": "",
    "hf_id": "",
    "gpu": "h100-sxm",
    "node": "",
    "fabric": "",
    "gpus": "64",
    "seq_len": "8192",
    "global_batch": "64",
    "batch_unit": "sequences",
    "tokens": "1e11",
    "precision": "bf16",
    "optimizer": "adamw",
    "framework": "fsdp2",
    "tp": "8",
    "pp": "1",
    "vpp": "1",
    "dp": "",
    "cp": "1",
    "ep": "1",
    "expert_tp": "",
    "mtp_layers": "0",
    "pipeline_layout": "",
    "sharding": "fsdp-full",
    "shard_group_size": "",
    "offload": "none",
    "micro_batch": "1",
    "recompute": "full",
    "recompute_layers": "",
    "recompute_modules": "",
    "sequence_parallel": "off",
    "flash_attention": "on",
    "cp_comm_type": "p2p",
    "moe_dispatcher": "alltoall",
    "moe_a2a_overlap": "off",
    "moe_capacity_factor": "",
    "moe_pad_to_capacity": "off",
    "grad_reduce_bf16": "off",
    "fused_swiglu": "off",
    "z_loss": "off",
    "fp8_attention": "off",
    "fp8_recipe": "auto",
    "nvfp4_rht": "on",
    "zero_init": "on",
    "oversubscription": "1",
    "calibrated": "on",
}

OVERRIDES: dict[str, tuple[str, str]] = {
    "o.instance": ("AWS instance", ""),
    "o.region": ("region of the AWS prices, e.g. us-west-2", ""),
    "o.prices_as_of": ("prices in force on, YYYY-MM-DD", ""),
    "o.on_demand_usd_per_hour": ("on-demand $/instance-hour", "$/h"),
    "o.spot_usd_per_hour": ("spot $/instance-hour", "$/h"),
    "o.capacity_block_usd_per_hour": ("capacity block $/instance-hour", "$/h"),
    "o.self_build.server_usd": ("server price, per node", "$"),
    "o.self_build.electricity_usd_per_kwh": ("electricity", "$/kWh"),
    "o.self_build.pue": ("PUE", ""),
    "o.self_build.colocation_usd_per_kw_month": ("colocation", "$/kW-month"),
    "o.use_after_run_years": ("self-build: years of use after this run", "years"),
    "o.runs": ("self-build: or runs of this length it serves", "runs"),
    "o.reliability.failures_per_gpu_hour": ("failures per GPU-hour", "1/h"),
    "o.reliability.storage_write_gbyte_per_s_per_node": ("checkpoint write per node", "GB/s"),
    "o.figure.accelerator.bf16_dense_tflops": ("GPU peak dense BF16", "TFLOP/s"),
    "o.figure.accelerator.memory_bandwidth_gb_per_s": ("GPU HBM bandwidth", "GB/s"),
    "o.figure.node.scale_out_gbit_per_s_per_nic": ("NIC speed", "Gb/s"),
    "o.figure.efficiency.gemm_efficiency": ("GEMM efficiency", "of peak"),
    "o.figure.efficiency.attention_efficiency": ("attention efficiency", "of peak"),
    "o.figure.scale_out_network.efficiency": ("scale-out collective efficiency", "of line rate"),
}
"""Catalog figures the planner lets a user override (form name → label, unit). ``o.figure.PART.FIELD`` names
a hardware or efficiency figure of the estimate (EstimateRequest.figure_overrides, keys in
app/domain/estimator/overrides.py); any other ``o.…`` is a CostOverrides path."""
FIGURE_PREFIX = "o.figure."

BOOLEAN_FIELDS = (
    "sequence_parallel", "flash_attention", "moe_a2a_overlap", "moe_pad_to_capacity", "grad_reduce_bf16", "fused_swiglu",
    "z_loss", "fp8_attention", "nvfp4_rht", "zero_init", "calibrated",
)  # fmt: skip
INT_FIELDS = (
    "gpus",
    "seq_len",
    "global_batch",
    "tp",
    "pp",
    "vpp",
    "dp",
    "cp",
    "ep",
    "expert_tp",
    "mtp_layers",
    "micro_batch",
    "shard_group_size",
    "recompute_layers",
)
FLOAT_FIELDS = ("tokens", "oversubscription", "moe_capacity_factor")
OPTIONAL_FIELDS = (
    "dp",
    "expert_tp",
    "pipeline_layout",
    "node",
    "fabric",
    "tokens",
    "shard_group_size",
    "recompute_layers",
    "recompute_modules",
    "moe_capacity_factor",
)
LIST_FIELDS = ("recompute_modules",)
"""Comma-separated lists (Megatron's --recompute-modules core_attn,mlp)."""
FORM_FIELDS = tuple(DEFAULTS) + tuple(OVERRIDES)
LAYOUT_FIELDS = ("tp", "pp", "vpp", "dp", "cp", "ep", "sharding", "shard_group_size", "offload", "micro_batch",
                 "recompute", "recompute_layers", "recompute_modules", "sequence_parallel", "pipeline_layout")  # fmt: skip
"""The hand-set parallel layout: what "Find the best plan" chooses itself, so errors here never block it."""
MAX_HF_CONFIG_CHARS = 64_000


@dataclass
class PlannerInput:
    """A parsed planner form: the raw values (for re-rendering) and, when valid, what the services take."""

    values: dict[str, str]
    errors: dict[str, str] = field(default_factory=dict)
    request: EstimateRequest | None = None
    tokens: float = 1e11
    overrides: CostOverrides = field(default_factory=CostOverrides)

    @property
    def ok(self) -> bool:
        return not self.errors and self.request is not None

    config_id: str | None = None
    """The stored config.json's id when ``values["hf_config"]`` is one (app/web/share.py), for short links."""

    def query(self) -> str:
        return to_query(self.values, self.config_id)

    def overridden(self) -> dict[str, str]:
        return {k: v for k, v in self.values.items() if k.startswith("o.") and v.strip()}


def _bool(value: str) -> bool | None:
    v = value.strip().lower()
    if v in ("on", "true", "1", "yes"):
        return True
    if v in ("off", "false", "0", "no"):
        return False
    return None


SUFFIXES = {"k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
"""Number suffixes the form reads like the exponent form: 16M = 1.6e7 (tokens per step), 15T = 1.5e13 tokens."""


def read_number(text: str, kind: type) -> int | float:
    t = text.strip().replace(",", "").replace("_", "").replace(" ", "")
    scale = 1.0
    if t and t[-1] in SUFFIXES:
        t, scale = t[:-1], SUFFIXES[t[-1]]
    f = float(t) * scale
    if not math.isfinite(f):
        raise ValueError("a finite number")
    if kind is int:
        if not f.is_integer():
            raise ValueError("a whole number")
        return int(f)
    return f


def form_values(params: Mapping[str, Any]) -> dict[str, str]:
    """The form's values: the query's, blanks for absent fields filled with the defaults (when the query names
    no field at all, every default)."""
    given = {k: str(params[k]) for k in FORM_FIELDS if k in params}
    if "/" in given.get("model", "") and not given.get("hf_id", "").strip():  # ?model=org/name typed by hand
        given.update(model=HUB, hf_id=given["model"])
    values = {k: given.get(k, v) for k, v in DEFAULTS.items()}
    values.update({k: given.get(k, "") for k in OVERRIDES})
    values.update({k: str(v) for k, v in params.items() if k.startswith("o.") and k not in OVERRIDES})
    return values


def _set_path(target: dict[str, Any], path: list[str], value: Any) -> None:
    """Set ``target[a][b]… = value``; a ValueError when a path is both a value and a group
    (``o.self_build.pue=1.2`` with ``o.self_build.pue.x=1``)."""
    for key in path[:-1]:
        target = target.setdefault(key, {})
        if not isinstance(target, dict):
            raise ValueError(f"{key} is a single figure, not a group of figures")
    if isinstance(target.get(path[-1]), dict):
        raise ValueError(f"{path[-1]} is a group of figures, not a single figure")
    target[path[-1]] = value


def _override_value(name: str, text: str) -> Any:
    """A number when it reads as one; otherwise the text (slugs, dates, on/off), which CostOverrides checks."""
    if name == "o.instance":
        return text.strip()
    try:
        return read_number(text, float)
    except ValueError:
        return text.strip()


def parse_planner(params: Mapping[str, Any]) -> PlannerInput:
    """Validate the form. Messages are keyed by form field name; the services' own errors are added later
    with :func:`add_service_errors`."""
    values = form_values(params)
    out = PlannerInput(values=values)
    body: dict[str, Any] = {}
    for name in DEFAULTS:
        text = values[name].strip()
        if name in ("model", "hf_config", "hf_id"):
            continue
        if not text:
            if name not in OPTIONAL_FIELDS:
                out.errors[name] = "required"
            continue
        if name in BOOLEAN_FIELDS:
            b = _bool(text)
            if b is None:
                out.errors[name] = "on or off"
            else:
                body[name] = b
        elif name in INT_FIELDS or name in FLOAT_FIELDS:
            try:
                num = read_number(text, int if name in INT_FIELDS else float)
            except ValueError:
                out.errors[name] = (
                    "a whole number (16M and 1e6 work too)"
                    if name in INT_FIELDS
                    else "a number, e.g. 1e12 or 15T"
                )
                continue
            if name == "tokens":
                out.tokens = float(num)
            body[name] = num
        elif name in LIST_FIELDS:
            body[name] = [item.strip() for item in text.replace(" ", ",").split(",") if item.strip()]
        else:
            body[name] = text
    if (
        values.get("batch_unit", "sequences").strip() == "tokens"
        and "global_batch" in body
        and "seq_len" in body
    ):
        tokens_per_step, seq = body["global_batch"], body["seq_len"]
        if seq > 0 and tokens_per_step % seq == 0:
            body["global_batch"] = tokens_per_step // seq
        else:
            low = max(1, int(tokens_per_step // seq)) if seq > 0 else 1
            out.errors["global_batch"] = (
                f"{tokens_per_step:,} tokens is not a whole number of {seq:,}-token sequences: "
                f"{low * seq:,} ({low:,} sequences) or {(low + 1) * seq:,} ({low + 1:,}) is"
            )
    elif values.get("batch_unit", "sequences").strip() not in ("sequences", "tokens"):
        out.errors["batch_unit"] = "sequences or tokens"
    body.pop("batch_unit", None)
    model = values["model"].strip()
    if model == HF:
        raw = values["hf_config"].strip()
        if not raw:
            out.errors["hf_config"] = "upload or paste a config.json, or pick a preset"
        elif len(raw) > MAX_HF_CONFIG_CHARS:
            out.errors["hf_config"] = f"longer than {MAX_HF_CONFIG_CHARS:,} characters"
        else:
            try:
                cfg = load_json_text(raw, "the config.json")
            except ValueError as exc:
                out.errors["hf_config"] = str(exc)
            else:
                if isinstance(cfg, dict):
                    body["hf_config"] = cfg
                else:
                    out.errors["hf_config"] = "a config.json is a JSON object"
    elif model == HUB:
        hub_id = values["hf_id"].strip()
        try:
            parse_hub_id(hub_id)
        except HubConfigError as exc:
            out.errors["hf_id"] = (
                str(exc) if hub_id else "type a Hugging Face id (org/name), or pick a preset"
            )
        else:
            body["model"] = hub_id
    elif model:
        body["model"] = model
    else:
        out.errors["model"] = "pick a preset or upload a config.json"
    if "tokens" not in body:
        out.errors.setdefault("tokens", "required")
    overrides: dict[str, Any] = {}
    figures: dict[str, float] = {}
    for name in override_names(values):
        text = values[name].strip()
        if not text:
            continue
        if name.startswith(FIGURE_PREFIX):
            try:
                figures[name.removeprefix(FIGURE_PREFIX)] = float(read_number(text, float))
            except ValueError:
                out.errors[name] = "a number"
            continue
        try:
            _set_path(overrides, name.split(".")[1:], _override_value(name, text))
        except ValueError as exc:
            out.errors[name] = str(exc)
    if figures:
        body["figure_overrides"] = figures
    try:
        out.overrides = CostOverrides.model_validate(overrides)
    except ValidationError as exc:
        for e in exc.errors():
            out.errors["o." + ".".join(str(p) for p in e["loc"])] = str(e["msg"]).removeprefix(
                "Value error, "
            )
    if out.errors:
        return out
    try:
        out.request = EstimateRequest.model_validate(body)
    except ValidationError as exc:
        for e in exc.errors():
            key = str(e["loc"][0]) if e["loc"] else "model"
            out.errors.setdefault(
                key if key in DEFAULTS else "model", str(e["msg"]).removeprefix("Value error, ")
            )
    return out


def add_service_errors(form: PlannerInput, errors: list[dict[str, Any]]) -> None:
    """Attach the services' ``{loc, msg}`` errors (loc ``["body", field, …]``) to form fields."""
    for e in errors:
        loc = [str(p) for p in e.get("loc", [])]
        if loc and loc[0] == "body":
            loc = loc[1:]
        key = loc[0] if loc else "model"
        if loc and loc[0] == "overrides":
            key = "o." + ".".join(loc[1:])
        if loc and loc[0] == "figure_overrides":
            key = FIGURE_PREFIX + ".".join(loc[1:])
        if key.startswith("hf_config"):
            key = "hf_config"
        if key == "model" and form.values.get("model") == HUB:
            key = "hf_id"
        if key not in FORM_FIELDS and not key.startswith("o."):
            key = "model"
        form.errors.setdefault(key, str(e.get("msg", "")))
    form.request = None


def to_query(values: Mapping[str, str], config_id: str | None = None) -> str:
    """The URL query of a form, in form order, naming only what differs from :data:`DEFAULTS` (a field cleared
    by the user stays, blank) and the overrides that are set: :func:`form_values` of it gives ``values`` back.
    With ``config_id`` the config.json is named by its stored id instead of carried whole. A link naming another
    model than the default keeps ``tp`` even at its default: a link with a model and no layout asks the planner
    for the search's layout (app/web/plan_start.py), and this one gives its layout."""
    pairs: list[tuple[str, str]] = []
    other_model = values.get("model", DEFAULTS["model"]) != DEFAULTS["model"]
    pin = other_model and all(values.get(k, DEFAULTS[k]) == DEFAULTS[k] for k in LAYOUT_FIELDS)
    for key, default in DEFAULTS.items():
        value = values.get(key, default)
        if key == "hf_config" and config_id:
            pairs.append((CONFIG_REF, config_id))
        elif value != default or (pin and key == "tp"):
            pairs.append((key, value))
    pairs += [(k, values[k]) for k in override_names(values) if values.get(k, "").strip()]
    return urlencode(pairs)


def override_names(values: Mapping[str, str]) -> list[str]:
    """The planner's override fields, then any other ``o.…`` path the values carry (from the API)."""
    return list(OVERRIDES) + sorted(k for k in values if k.startswith("o.") and k not in OVERRIDES)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e6:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _flatten(prefix: str, data: Mapping[str, Any], out: dict[str, str]) -> None:
    for key, value in data.items():
        name = f"{prefix}.{key}"
        if isinstance(value, Mapping):
            _flatten(name, value, out)
        elif value is not None:
            out[name] = _text(value)


def values_from_inputs(
    inputs: Mapping[str, Any], overrides: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Form values from a stored scenario (EstimateRequest fields + tokens, and CostOverrides as a dict)."""
    values = dict(DEFAULTS)
    values.update({k: "" for k in OVERRIDES})
    for key, value in inputs.items():
        if key == "model" and isinstance(value, str) and "/" in value:
            values["model"], values["hf_id"] = HUB, value
        elif key == "hf_config" and value is not None:
            values["model"] = HF
            values["hf_config"] = json.dumps(value, separators=(",", ":"), sort_keys=True)
        elif key in DEFAULTS and value is not None:
            values[key] = _text(value)
    for key in ("dp", "node", "fabric", "shard_group_size"):
        if inputs.get(key) is None:
            values[key] = ""
    for key, value in (inputs.get("figure_overrides") or {}).items():
        values[FIGURE_PREFIX + key] = _text(value)
    flat: dict[str, str] = {}
    _flatten("o", overrides or {}, flat)
    values.update(flat)
    return values


def inputs_from_form(form: PlannerInput) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a scenario stores for a valid form: (inputs, overrides), both JSON-ready."""
    assert form.request is not None
    inputs = form.request.model_dump(mode="json", exclude_none=True)
    inputs["tokens"] = form.tokens
    overrides = form.overrides.model_dump(mode="json", exclude_defaults=True)
    return inputs, overrides
