"""The plan matrix of ``make check-exports``: writes every plan's files in every format capplan exports.

Runs in capplan's own environment (``.venv``); ``validate.py`` then feeds the files to the real consumers in
``.venv-exports``. Each plan goes through the same path as ``capplan export`` (estimate request → plan
document with the reliability model's checkpoint interval → ``export_plan``). A format whose framework
cannot run the plan is not written; capplan's refusal (the capability table) is recorded instead.

    .venv/bin/python scripts/check_exports/matrix.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from app.domain.catalog import load_catalog
from app.domain.export import EXPORT_FORMATS, PlanDocumentError, export_plan, parse_plan_document
from app.schemas import EstimateRequest
from app.services.documents import plan_document_from_request

H100 = {"gpu": "h100-sxm", "seq_len": 8192, "tokens": 1e12}

# ≥ 14 plans: dense and MoE; DDP, FSDP2, HSDP, ZeRO-1/2/3, Megatron distributed optimizer; TP, PP, VPP
# (uneven), CP, EP; bf16, fp16, fp8; CPU and NVMe offload — on the three frameworks.
PLANS: dict[str, dict] = {
    "llama8b-fsdp2-ddp": dict(model="llama3.1-8b", gpus=8, dp=8, sharding="ddp", global_batch=64,
                              recompute="selective"),
    "llama70b-fsdp2-tp8": dict(model="llama3.1-70b", gpus=64, tp=8, dp=8, sharding="fsdp-full", global_batch=64,
                               recompute="full"),
    "llama70b-fsdp2-hsdp-cp2": dict(model="llama3.1-70b", gpus=64, tp=4, cp=2, dp=8, sharding="fsdp-hybrid",
                                    shard_group_size=4, global_batch=64, seq_len=16384, recompute="full"),
    "llama405b-fsdp2-pp-vpp-fp8": dict(model="llama3.1-405b", gpus=1024, tp=8, pp=8, vpp=2, dp=16,
                                       sharding="fsdp-full", global_batch=512, precision="fp8", recompute="full"),
    # torchao's MXFP8 linears on Blackwell (torchtitan's MXFP8LinearConverter on the transformer layers)
    "llama8b-fsdp2-mxfp8-b200": dict(model="llama3.1-8b", gpu="b200", gpus=16, tp=2, dp=8, sharding="fsdp-full",
                                     global_batch=64, precision="fp8", fp8_recipe="mxfp8"),
    "llama8b-fsdp2-compiled-model-eager-loss": dict(model="llama3.1-8b", gpus=8, dp=8, sharding="fsdp-full",
                                                    global_batch=64, fused_kernels=True, fused_loss=False),
    "llama70b-fsdp2-tp8-async-tp": dict(model="llama3.1-70b", gpus=64, tp=8, dp=8, sharding="fsdp-full",
                                        global_batch=64, recompute="full", fused_kernels=True, tp_comm_overlap=True,
                                        sequence_parallel=True),
    "llama8b-fsdp2-offload": dict(model="llama3.1-8b", gpus=16, dp=16, sharding="fsdp-full", offload="params-cpu",
                                  global_batch=64),
    "deepseek-v3-fsdp2-pp-ep": dict(model="deepseek-v3", gpus=256, pp=8, dp=32, ep=8, sharding="fsdp-full",
                                    global_batch=512, seq_len=4096, recompute="full"),
    "deepseek-v3-fsdp2-tp2-ep32-folded": dict(model="deepseek-v3", gpus=256, tp=2, pp=8, dp=16, ep=32, expert_tp=1,
                                              sharding="fsdp-full", sequence_parallel=True, global_batch=512,
                                              seq_len=4096, recompute="full"),
    "llama405b-megatron-pp16-uneven": dict(model="llama3.1-405b", gpus=1024, tp=8, pp=16, dp=8,
                                           framework="megatron", sharding="megatron-distopt",
                                           sequence_parallel=True, global_batch=512, recompute="full"),
    "llama70b-megatron-pp8-vpp4": dict(model="llama3.1-70b", gpus=128, tp=8, pp=8, vpp=4, dp=2,
                                       framework="megatron", sharding="megatron-distopt", sequence_parallel=True,
                                       global_batch=128, recompute="selective"),
    "gpt3-megatron-ddp-fp16": dict(model="gpt3-175b", gpu="a100-80gb", gpus=768, tp=8, pp=8, dp=12,
                                   framework="megatron", sharding="ddp", precision="fp16", seq_len=2048,
                                   global_batch=1536, flash_attention=False),
    "llama8b-megatron-fsdp2-tp2": dict(model="llama3.1-8b", gpus=16, tp=2, dp=8, framework="megatron",
                                       sharding="fsdp-full", global_batch=64),
    "llama8b-megatron-cpu-offload": dict(model="llama3.1-8b", gpus=16, dp=16, framework="megatron",
                                         sharding="megatron-distopt", offload="optimizer-cpu", global_batch=64),
    "deepseek-v3-megatron-pp16-ep8": dict(model="deepseek-v3", gpus=2048, tp=8, pp=16, dp=16, ep=8,
                                          framework="megatron", sharding="megatron-distopt",
                                          sequence_parallel=True, global_batch=4096, seq_len=4096,
                                          recompute="selective", precision="fp8"),
    "deepseek-v3-megatron-deepep-a2a-overlap": dict(model="deepseek-v3", gpus=256, pp=8, vpp=2, dp=32, ep=32,
                                                    framework="megatron", sharding="megatron-distopt",
                                                    global_batch=4096, seq_len=4096, recompute="selective",
                                                    precision="fp8", moe_dispatcher="deepep", moe_a2a_overlap=True,
                                                    grad_reduce_bf16=True,
                                                    recompute_modules=["mla_up_proj", "mlp"]),
    "mixtral-megatron-ep8-capacity-pad": dict(model="mixtral-8x7b", gpus=64, dp=64, ep=8, framework="megatron",
                                              sharding="megatron-distopt", global_batch=256,
                                              moe_capacity_factor=1.25, moe_pad_to_capacity=True),
    # Transformer Engine's all-gather CP (--cp-comm-type all_gather, TransformerConfig.cp_comm_type), Llama 3's CP
    "llama70b-megatron-cp4-all-gather": dict(model="llama3.1-70b", gpus=64, tp=8, cp=4, dp=2, framework="megatron",
                                             sharding="megatron-distopt", sequence_parallel=True, seq_len=131072,
                                             global_batch=4, cp_comm_type="all_gather"),
    "mixtral-megatron-tp2-ep8-folded": dict(model="mixtral-8x7b", gpus=16, tp=2, pp=2, dp=4, ep=8, expert_tp=1,
                                            framework="megatron", sharding="megatron-distopt",
                                            sequence_parallel=True, global_batch=64),
    # NVIDIA's DeepSeek-V3 recipe shape: the MTP layer with the loss in the last of 16 stages, which holds one layer
    "deepseek-v3-megatron-mtp-layout": dict(model="deepseek-v3", gpus=256, pp=16, dp=16, ep=8, mtp_layers=1,
                                            pipeline_layout="Et*4|(t*4|)*14tmL", framework="megatron",
                                            sharding="megatron-distopt", global_batch=4096),
    # NVIDIA's NVFP4 Llama 3 70B on 64 GB300 (Megatron-Bridge 26.04.01: PP 4, VP 5)
    "llama70b-megatron-nvfp4-gb300": dict(model="llama3.1-70b", gpu="gb300", node="gb300-nvl72", gpus=64, pp=4,
                                          vpp=5, dp=16, framework="megatron", sharding="megatron-distopt",
                                          global_batch=256, precision="nvfp4"),
    # NVIDIA's MXFP8 Llama 3 70B on 64 GB200 (NeMo 26.04.01 performance table: TP 2, PP 4, VP 5): --fp8-recipe mxfp8
    "llama70b-megatron-mxfp8-gb200": dict(model="llama3.1-70b", gpu="gb200", node="gb200-nvl72", gpus=64, tp=2, pp=4,
                                          vpp=5, dp=8, framework="megatron", sharding="megatron-distopt",
                                          sequence_parallel=True, global_batch=256, precision="fp8",
                                          fp8_recipe="mxfp8", recompute="none"),
    # Megatron-Bridge's Llama 3.1 405B shape: the embedding and the loss in stages of their own, pp·vpp = layers + 2
    "llama405b-megatron-embedding-loss-stages": dict(model="llama3.1-405b", gpus=512, tp=4, pp=16, vpp=8, dp=8,
                                                     pipeline_layout="E|(t|)*126L", framework="megatron",
                                                     sharding="megatron-distopt", sequence_parallel=True,
                                                     global_batch=512, precision="fp8"),
    # capplan's own split of 61 layers over 8 stages with an MTP layer (the last lightened): the layout carries the m
    "deepseek-v3-megatron-mtp-own-split": dict(model="deepseek-v3", gpus=256, pp=8, dp=32, ep=8, mtp_layers=1,
                                                framework="megatron", sharding="megatron-distopt", global_batch=4096),
    "mixtral-megatron-ep8-cp2": dict(model="mixtral-8x7b", gpus=64, tp=2, cp=2, dp=16, ep=8, framework="megatron",
                                     sharding="megatron-distopt", sequence_parallel=True, global_batch=256),
    "llama8b-deepspeed-zero1-pp4": dict(model="llama3.1-8b", gpus=16, pp=4, dp=4, framework="deepspeed",
                                        sharding="zero1", global_batch=64, recompute="full"),
    "llama8b-deepspeed-zero1-fp32-grad-accum": dict(model="llama3.1-8b", gpus=16, dp=16, framework="deepspeed",
                                                    sharding="zero1", global_batch=64, grad_accum_fp32=True),
    "llama8b-deepspeed-zero2-fp16": dict(model="llama3.1-8b", gpus=16, dp=16, framework="deepspeed",
                                         sharding="zero2", precision="fp16", global_batch=64),
    "llama70b-deepspeed-zero3-nvme": dict(model="llama3.1-70b", gpus=64, dp=64, framework="deepspeed",
                                          sharding="zero3", offload="nvme", global_batch=128, recompute="full"),
    "llama8b-deepspeed-zero3-cpu-offload": dict(model="llama3.1-8b", gpus=8, dp=8, framework="deepspeed",
                                                sharding="zero3", offload="params-cpu", global_batch=32),
}  # fmt: skip


def main(out: Path) -> int:
    catalog = load_catalog(Path(__file__).resolve().parents[2] / "data")
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, dict] = {}
    for name, fields in PLANS.items():
        request = EstimateRequest(**(H100 | fields))
        doc = plan_document_from_request(catalog, request)
        folder = out / name
        folder.mkdir(exist_ok=True)
        entry: dict = {"plan": doc.plan.model_dump(mode="json"), "gpus": doc.hardware.gpus,
                       "gpus_per_host": doc.hardware.gpus_per_host, "arch": doc.arch.slug,
                       "n_layers": doc.arch.n_layers, "steps": doc.steps,
                       "checkpoint_interval_s": doc.estimate.checkpoint_interval_s,
                       "step_time_s": doc.estimate.step_time_s, "files": {}, "refused": {}}  # fmt: skip
        for fmt in EXPORT_FORMATS:
            try:
                f = export_plan(doc, fmt)
            except PlanDocumentError as exc:
                entry["refused"][fmt] = str(exc)
                continue
            (folder / f.filename).write_text(f.content)
            entry["files"][fmt] = f.filename
        # capplan is the plan file's consumer: it must read back to the same document
        assert parse_plan_document((folder / "plan.json").read_text()) == doc, name
        manifest[name] = entry
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    print(f"wrote {len(PLANS)} plans to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "var/check-exports")))
