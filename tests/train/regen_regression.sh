#!/usr/bin/env bash
# Print the rows of test_train_regression.c's table for the given OpenBLAS
# cores (default: Prescott Haswell SkylakeX Zen Cooperlake, each forced with
# OPENBLAS_CORETYPE; the CPU must support the core's instructions).
# usage: tests/train/regen_regression.sh build/cli/strata [CORE...]
set -euo pipefail
BIN=$1; shift
CORES=${*:-Prescott Haswell SkylakeX Zen Cooperlake}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
T="--layers 2 --d-model 64 --heads 2 --seq-len 64 --batch 8 --steps 60 --warmup 6 --eval-every 0 --threads 1 --precondition-frequency 5"
val() { OPENBLAS_CORETYPE=$1 "$BIN" train $T "${@:2}" --metrics "$W/m.jsonl" --quiet >/dev/null
        tail -1 "$W/m.jsonl" | python3 -c 'import json,sys; print(repr(json.load(sys.stdin)["final_val_loss"]))'; }
# The table's learning rates (test_train_regression.c's tiny_options), not the
# trainer's current defaults; the AdamW tail at 3e-3 too.
lr() { case $1 in muon) echo 0.02 ;; kl-shampoo) echo 0.01 ;; *) echo 0.003 ;; esac; }
# KL-Shampoo's estimates uncorrected, as the table was measured.
T="$T --adamw-lr 0.003 --kl-bias-correction off"
for c in $CORES; do
  s=(); for o in adamw shampoo muon soap kl-shampoo; do
    s+=("$(val "$c" --optimizer $o --lr "$(lr $o)")"); done
  g=(); for o in shampoo soap kl-shampoo; do g+=("$(val "$c" --optimizer $o --lr "$(lr $o)" --stagger-refresh)"); done
  echo "    {\"$c\","
  echo "     {${s[0]}, ${s[1]}, ${s[2]}, ${s[3]},"
  echo "      ${s[4]}},"
  echo "     {${g[0]}, ${g[1]}, ${g[2]}}},"
done
