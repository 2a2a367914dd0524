"""``python -m app.bench --preset NAME [--output FILE] …``: what torchrun starts on every rank.

Use ``capplan bench run`` rather than calling this directly: it builds the torchrun command, prints the
predicted-vs-measured table and posts the result.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from app.bench.presets import PRESETS, get_preset


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m app.bench", description=__doc__)
    p.add_argument("--preset", required=True, choices=sorted(PRESETS))
    p.add_argument("--output", type=Path, default=None, help="write the result JSON here (rank 0)")
    p.add_argument("--accelerator", default=None, help="catalog slug to predict for (overrides the preset)")
    p.add_argument("--layers", type=int, default=None, help="scale the model to this many layers")
    p.add_argument("--micro-batch", type=int, default=None)
    p.add_argument("--seq-len", type=int, default=None)
    p.add_argument("--recompute", choices=["none", "selective", "full"], default=None)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--warmup-steps", type=int, default=None)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    from app.bench.runner import run
    from app.domain.catalog import load_catalog
    from app.settings import Settings

    args = parse_args(argv)
    preset = get_preset(
        args.preset, accelerator=args.accelerator, layers=args.layers, micro_batch=args.micro_batch,
        seq_len=args.seq_len, recompute=args.recompute, steps=args.steps, warmup_steps=args.warmup_steps,
    )  # fmt: skip
    run(preset, load_catalog(Settings().data_dir), args.output)


if __name__ == "__main__":
    main()
