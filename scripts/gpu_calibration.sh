#!/usr/bin/env bash
# GPU calibration on one node: the GPU training-step presets, the GEMM sweep and (with >= 2 GPUs) the NCCL
# collective sweep, each writing one capplan.bench/v1 JSON result under OUT_DIR. Budget: < 8 minutes on one
# H200 (each step is capped by `timeout`; a preset that fails or times out is logged and the script goes on).
#
#   scripts/gpu_calibration.sh [OUT_DIR]            # default: var/gpu-calibration/<date>
#   ACCELERATOR=h100-sxm scripts/gpu_calibration.sh  # the catalog slug of this GPU (default: h200-sxm)
#   REPORT_TO=http://capplan:8000 TOKEN=… scripts/gpu_calibration.sh   # also post every result
#
# Prepared, not yet run: the task that wrote it had no GPU. Run it once on a GPU machine and commit the results
# under data/ (with the date, GPU, driver and torch version that the JSON files record).
set -euo pipefail

cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT_DIR=${1:-var/gpu-calibration/$(date -u +%Y-%m-%d)}
ACCELERATOR=${ACCELERATOR:-h200-sxm}
GPUS=$(nvidia-smi --list-gpus 2>/dev/null | wc -l || echo 0)
mkdir -p "$OUT_DIR"
START=$(date +%s)
log() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$OUT_DIR/log.txt"; }

if [ "$GPUS" -lt 1 ]; then
  log "no NVIDIA GPU visible (nvidia-smi); nothing to do"
  exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT_DIR/nvidia-smi.csv"
"$PY" -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' \
  | tee "$OUT_DIR/versions.txt"

run() {  # run NAME SECONDS NPROC [extra runner args…]
  local name=$1 limit=$2 nproc=$3
  shift 3
  log "start $name ($nproc GPU(s), limit ${limit}s)"
  if timeout "$limit" "$PY" -m torch.distributed.run --standalone --nproc-per-node="$nproc" \
      -m app.bench --preset "$name" --output "$OUT_DIR/$name.json" --accelerator "$ACCELERATOR" "$@" \
      >"$OUT_DIR/$name.log" 2>&1; then
    log "done  $name -> $OUT_DIR/$name.json"
    if [ -n "${REPORT_TO:-}" ]; then
      .venv/bin/capplan bench submit "$OUT_DIR/$name.json" --report-to "$REPORT_TO" --token "${TOKEN:-}" \
        || log "could not post $name"
    fi
  else
    log "FAILED $name (exit $?); see $OUT_DIR/$name.log"
  fi
}

# 1. Llama 3.1 8B scaled to 8 layers, one GPU, seq 4096, micro-batch 2: step time, memory, FLOPs, GEMM sweep
#    (~1.5 min: model init on the GPU, 3 warm-up + 10 measured steps, 11 GEMM shapes).
run llama3_8b_fsdp1_h200 180 1
# 2. The same with selective recompute (recompute FLOPs and activation terms on GPU), fewer steps (~1 min).
run llama3_8b_fsdp1_h200_selective 120 1 --steps 5
# 3. Collective sweep: needs >= 2 GPUs on the node (one GPU has nothing to communicate with).
if [ "$GPUS" -ge 2 ]; then
  run gemm_sweep_gpu 150 "$GPUS"
else
  log "skip collective sweep: $GPUS GPU on this node (needs >= 2)"
fi

log "results:"
ls -l "$OUT_DIR"/*.json 2>/dev/null | tee -a "$OUT_DIR/log.txt" || true
for f in "$OUT_DIR"/*.json; do
  [ -e "$f" ] || continue
  "$PY" - "$f" <<'EOF'
import sys
from app.bench.report import result_table
from app.schemas import BenchmarkResultIn
r = BenchmarkResultIn.model_validate_json(open(sys.argv[1], "rb").read())
print(f"\n== {r.preset} on {r.device_name} ({r.world_size} rank(s)) ==")
print(result_table(r))
EOF
done | tee "$OUT_DIR/tables.txt"
log "total $(( $(date +%s) - START )) s"
