#!/usr/bin/env bash
# The one command for this project's lent GPU machine (the `device` tool): install the carried wheels, run
# scripts/gpu_calibration.sh, and put what must come back under $OUT (at most 8 files come back: the results
# travel as one archive, plus the log and the tables to read at once).
#
# Here first:  scripts/device_wheels.sh          (fills .whl/, ~3 MB)
# Then the device tool's run with carry [".whl"], timeout_s 580:
#              bash scripts/device_run.sh
# Back here:   tar xzf <files_at>/calibration.tgz -C var/gpu-calibration/
#              capplan bench ship var/gpu-calibration/*.json --folder YYYY-MM-h200
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-var/device-out}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed" | tee "$OUT/log.txt"; exit 1; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PY=${PY:-$(command -v python3)}
WORK=/tmp/capplan-calibration
rm -rf "$WORK"
timeout -k 20 520 bash scripts/gpu_calibration.sh "$WORK"
status=$?
tar czf "$OUT/calibration.tgz" -C "$WORK" .
cp "$WORK/log.txt" "$OUT/log.txt" 2>/dev/null
cp "$WORK/tables.txt" "$OUT/tables.txt" 2>/dev/null
cat "$WORK/tables.txt" 2>/dev/null | head -c 6000
echo "gpu_calibration.sh exit $status"
exit $status
