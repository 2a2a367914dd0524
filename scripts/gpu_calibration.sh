#!/usr/bin/env bash
# GPU calibration on one node: the GPU training-step presets, the GEMM sweep and (with >= 2 GPUs) the NCCL
# collective sweep, each writing one capplan.bench/v1 JSON result under OUT_DIR, then tables.txt with every
# figure next to the estimator's prediction. Budget: < 8 minutes on one H200 (~3 expected; each preset is capped
# by `timeout`; one that fails or times out is logged and the script goes on).
#
#   scripts/gpu_calibration.sh [OUT_DIR]             # default: var/gpu-calibration/<date>
#   ACCELERATOR=h100-sxm scripts/gpu_calibration.sh   # the catalog slug of this GPU (default: h200-sxm)
#   REPORT_TO=http://capplan:8000 TOKEN=… scripts/gpu_calibration.sh   # also post every result
#   DEVICE=cpu scripts/gpu_calibration.sh OUT_DIR     # dry run of this script on CPU (gloo, tiny model): CI runs it
#   PY=/path/to/python scripts/gpu_calibration.sh     # the Python with CUDA torch (default: .venv's if it sees a
#                                                    # GPU, else python3); it needs pydantic
#
# Then, where capplan is installed: `capplan bench ship OUT_DIR/*.json --folder YYYY-MM-<gpu>` copies the GPU
# results under data/calibration (they calibrate every estimate from then on) and prints the README table.
# On this project's lent H200 machine: scripts/device_run.sh (it installs the wheels that machine lacks).
set -uo pipefail

OUT_DIR=$(realpath -m "${1:-$(dirname "$0")/../var/gpu-calibration/$(date -u +%Y-%m-%d)}")  # before the cd
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cuda}
ACCELERATOR=${ACCELERATOR:-h200-sxm}
export PYTHONUNBUFFERED=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
if compgen -G "$OUT_DIR/*.json" >/dev/null; then
  echo "$OUT_DIR already holds results; give an empty or new folder (they would be tabled and shipped too)" >&2
  exit 2
fi
mkdir -p "$OUT_DIR"
START=$(date +%s)
log() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$OUT_DIR/log.txt"; }

if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ] && { [ "$DEVICE" = cpu ] || .venv/bin/python -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; }; then
    PY=.venv/bin/python
  else
    PY=$(command -v python3)
  fi
fi

# Preflight (seconds): the imports the runner needs and, on GPU, one NCCL process group. A missing package or a
# broken driver stops here instead of costing every preset its timeout.
if ! timeout -k 5 60 "$PY" - "$DEVICE" <<'EOF' 2>&1 | tee "$OUT_DIR/versions.txt"
import sys
import torch, torch.distributed as dist
import pydantic  # noqa: F401  (the runner validates its result with the API schema)
from app.bench.runner import run  # noqa: F401
device = sys.argv[1]
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "pydantic", pydantic.VERSION)
if device == "cuda":
    assert torch.cuda.is_available(), "torch sees no CUDA GPU"
    print("gpus", torch.cuda.device_count(), torch.cuda.get_device_name(0), "nccl", torch.cuda.nccl.version())
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29517", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    dist.all_reduce(torch.ones(1, device="cuda"))
    dist.destroy_process_group()
print("preflight ok")
EOF
then
  log "preflight FAILED with $PY (see $OUT_DIR/versions.txt); nothing measured"
  exit 1
fi

if [ "$DEVICE" = cuda ]; then
  GPUS=$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
  nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv \
    >"$OUT_DIR/nvidia-smi.csv" 2>&1 || true
else
  GPUS=0
fi
FAILED=0

run() {  # run NAME SECONDS NPROC [extra runner args…]
  local name=$1 limit=$2 nproc=$3 status
  shift 3
  local accel=()
  [ "$DEVICE" = cuda ] && accel=(--accelerator "$ACCELERATOR")
  log "start $name ($nproc process(es), limit ${limit}s)"
  timeout -k 15 "$limit" "$PY" -m torch.distributed.run --standalone --nproc-per-node="$nproc" \
      -m app.bench --preset "$name" --output "$OUT_DIR/$name.json" "${accel[@]}" "$@" \
      >"$OUT_DIR/$name.log" 2>&1
  status=$?
  if [ "$status" -eq 0 ] && [ -s "$OUT_DIR/$name.json" ]; then
    log "done  $name -> $OUT_DIR/$name.json"
    if [ -n "${REPORT_TO:-}" ]; then
      "$PY" -m app.cli bench submit "$OUT_DIR/$name.json" --report-to "$REPORT_TO" --token "${TOKEN:-}" \
        || log "could not post $name"
    fi
  else
    FAILED=$((FAILED + 1))
    log "FAILED $name (exit $status$([ "$status" -eq 124 ] && echo ': timed out')); last lines of $OUT_DIR/$name.log:"
    tail -n 15 "$OUT_DIR/$name.log" | tee -a "$OUT_DIR/log.txt"
  fi
}

if [ "$DEVICE" = cpu ]; then
  # The same flow on CPU with the CI preset: proves the script, not the hardware.
  run tiny_fsdp2_cpu 240 2
else
  # Worst case on one GPU: 60 + 120 + 180 s plus kill margins, inside device_run.sh's 520 s.
  # 1. Llama 3.1 8B scaled to 8 layers with selective recompute (the recompute FLOPs and activation terms on
  #    GPU), 5 steps (~40 s). First, so that run 2, the newer, supplies the figures both measure.
  run llama3_8b_fsdp1_h200_selective 120 1 --steps 5
  # 2. The same without recompute, one GPU, seq 4096, micro-batch 2: step time, memory, FLOPs, GEMM sweep
  #    (~1 min: model init on the GPU, 3 warm-up + 10 measured steps, 11 GEMM shapes).
  run llama3_8b_fsdp1_h200 180 1
  # 3. Collective sweep: needs >= 2 GPUs on the node (one GPU has nothing to communicate with).
  if [ "$GPUS" -ge 2 ]; then
    run gemm_sweep_gpu 150 "$GPUS"
  else
    log "skip collective sweep: $GPUS GPU on this node (needs >= 2)"
  fi
fi

log "results:"
for f in "$OUT_DIR"/*.json; do
  [ -e "$f" ] || continue
  "$PY" - "$f" <<'EOF' || echo "(could not read $f)"
import sys
from app.bench.report import result_table
from app.schemas import BenchmarkResultIn
r = BenchmarkResultIn.model_validate_json(open(sys.argv[1], "rb").read())
print(f"\n== {r.preset} on {r.device_name} ({r.world_size} rank(s)); {r.software} ==")
print(result_table(r))
EOF
done | tee "$OUT_DIR/tables.txt"
log "total $(( $(date +%s) - START )) s, $FAILED preset(s) failed"
[ "$FAILED" -eq 0 ]
