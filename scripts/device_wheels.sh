#!/usr/bin/env bash
# Download, here, the wheels the benchmark runner needs on a GPU machine that has CUDA torch and numpy but no
# pydantic (this project's lent H200: Python 3.12, x86-64, no network). Versions are the ones constraints.txt
# pins; the wheels land in .whl/ (git-ignored), which scripts/device_run.sh installs from.
#
#   scripts/device_wheels.sh [PYTHON_VERSION]     # default 3.12
set -euo pipefail
cd "$(dirname "$0")/.."
PYVER=${1:-3.12}
PACKAGES=(pydantic pydantic_core annotated-types typing-inspection typing_extensions)
PINS=()
for p in "${PACKAGES[@]}"; do
  pin=$(grep -i -E "^${p//[-_]/[-_]}==" constraints.txt | head -1)
  [ -n "$pin" ] || { echo "no pin for $p in constraints.txt" >&2; exit 1; }
  PINS+=("$pin")
done
rm -rf .whl && mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl "${PINS[@]}"
ls -1 .whl
du -sh .whl
