#!/usr/bin/env bash
# scripts/device-check.sh BUNDLE OUT — the GPU checks of issues #10 and #20,
# run from a device bundle (scripts/device-bundle.sh: a folder or its
# .tar.xz) with no build step, on one NVIDIA GPU in a few minutes.
#
# Prints an inventory first (GPU, driver, nvcc, Python, torch, where each
# CUDA library was found), then one line per check, PASS/FAIL/SKIP, and last
# "N passed, N failed, N skipped". Exit 0 when none failed.
#
# OUT receives three files (the GPU machine returns at most 8): summary.txt
# (the inventory and the check lines), results.json (every measured number,
# by check) and logs.tgz (every check's full log and metrics). Scratch (the
# extracted bundle, the corpus, the nvme file) lives in a mktemp folder,
# removed at exit.
#
# Evidence (review D3, D4, D5): a check passes only on what it measured
# itself: the program's exit status 0 AND its own complete output (cmocka's
# PASSED count equal to its RUN count, every expected record present, the
# numbers within their target). A timeout, a missing number or a 77 ("no
# device") with a GPU present is a FAIL. Without a GPU (nvidia-smi lists
# none), the GPU checks are SKIPped, never passed: the dry run on a machine
# without one ends "2 passed, 0 failed, 8 skipped".
#
# Checks, cheapest evidence first:
#   libs          every bundled program and library resolves every library
#                 (bundle + system C/C++ runtime + the CUDA libraries found)
#   cpu_refs      the CPU side the GPU checks stand on (backend ops vs their C
#                 references, streams/events, the refresh engine's stream seam
#                 through a deferred-shadow test backend); runs anywhere
#   cuda_ops      every backend op, CUDA vs the C reference (test_cuda_ops)
#   gpt_cuda      GPU GPT vs CPU GPT: loss, gradients, 20-step SGD curve
#   async_s0      strata train --device cuda --threads 1, Shampoo sync vs
#                 --async --staleness 0, 30 steps: every loss and the final
#                 weights' hash bit-identical (async runs BLAS on one thread,
#                 so sync must too: BLAS results depend on the thread count)
#   gpt_curve     the GPU GPT's first 20 Shampoo steps vs the CPU's, same seed:
#                 step 1 within 1e-5 relative (float32 model contract,
#                 gpt_cuda.h), every step within 2e-3 relative (float32
#                 products in another order, compounded over 20 steps)
#   async_stagger async staggered Shampoo (F 10) on the GPU GPT, 120 steps:
#                 step time p50/p99/max over steps 11.. (after a 10-step
#                 warm-up); target max/p50 <= 1.2; the training stream's
#                 waits on roots (timed with events; count, bytes, bound at the measured pinned
#                 rate) and the host's waits on workers as fractions of the
#                 steps' time; target < 1%; the training thread's time in
#                 the seam's copy calls (the critical path) reported beside
#   ns_vs_sgemm   Newton-Schulz and Gram-NS TFLOP/s vs cuBLAS SGEMM on the
#                 same shapes, same run; target NS >= 0.7 of SGEMM
#   tiers         pinned/pageable/managed/nvme bandwidth vs the cudaMemcpy
#                 peak; target pinned >= 0.8 of peak
#   newton_f32    strata race, Shampoo F = 1 sync vs async S = 1 with
#                 --root-method newton-f32 (float32 Newton roots on the GPU),
#                 60 steps (run last): crit% of both printed (goal <= 1%); passes when
#                 both end, most roots are Newton's and async's crit% is lower
#
# Time: STRATA_DEVICE_BUDGET_S (default 360 s) for the whole script, checked
# by the script itself: every check runs under `timeout` with the smaller of
# its own limit and what is left; a check with under 15 s left FAILs ("no
# time"), it is not skipped.
set -u
if [ $# -ne 2 ]; then
    echo "usage: $0 BUNDLE OUT   (BUNDLE: scripts/device-bundle.sh's folder or .tar.xz)" >&2
    exit 2
fi
START=$(date +%s)
BUDGET=${STRATA_DEVICE_BUDGET_S:-360}
mkdir -p "$2" || exit 2
OUT=$(cd "$2" && pwd)
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/strata-device.XXXXXX") || exit 2
trap 'rm -rf "$SCRATCH"' EXIT
LOGS=$SCRATCH/logs
mkdir -p "$LOGS"
SUMMARY=$OUT/summary.txt
RESULTS=$SCRATCH/results.jsonl   # one {"check":..., key: value} object a line
: >"$SUMMARY"
rm -f "$OUT/results.json" "$OUT/logs.tgz"
PASS=0 FAIL=0 SKIP=0

say() { echo "$*" | tee -a "$SUMMARY"; }

# ---- the bundle
if [ -d "$1" ]; then
    B=$(cd "$1" && pwd)
elif [ -f "$1" ]; then
    mkdir -p "$SCRATCH/bundle" && tar -xJf "$1" -C "$SCRATCH/bundle" || {
        echo "device-check: cannot extract $1" >&2; exit 2; }
    B=$(dirname "$(find "$SCRATCH/bundle" -maxdepth 3 -name MANIFEST | head -n 1)")
else
    echo "device-check: no bundle at $1" >&2
    exit 2
fi
if [ ! -f "$B/MANIFEST" ] || [ ! -x "$B/bin/strata" ]; then
    echo "device-check: $1 is not a device bundle (no MANIFEST or bin/strata)" >&2
    exit 2
fi

# ---- inventory
CUDA_LIBS="libcudart.so.13 libcublas.so.13 libcublasLt.so.13"
PY=$(command -v python3 || true)
find_cuda_lib() { # soname: the first folder holding it (toolkit, torch wheels, ld cache)
    local lib=$1 d
    for d in ${CUDA_HOME:+$CUDA_HOME/lib64} /usr/local/cuda/lib64 /usr/local/cuda/lib \
             /usr/local/cuda/targets/x86_64-linux/lib /usr/local/lib; do
        [ -e "$d/$lib" ] && { echo "$d"; return; }
    done
    if [ -n "$PY" ]; then
        local sp
        for sp in $("$PY" -c 'import site; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null); do
            [ -d "$sp/nvidia" ] || continue
            d=$(find "$sp/nvidia" -maxdepth 4 -name "$lib" 2>/dev/null | head -n 1)
            [ -n "$d" ] && { dirname "$d"; return; }
        done
    fi
    d=$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l { print $NF; exit }')
    [ -n "$d" ] && dirname "$d"
}
LDP=""
{
    echo "== inventory"
    echo "bundle $B: $(sed -n 2p "$B/MANIFEST")"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader \
            2>&1 | sed 's/^/gpu /'
    else
        echo "gpu none (no nvidia-smi)"
    fi
    if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
        echo "nvcc $({ command -v nvcc >/dev/null && nvcc --version || /usr/local/cuda/bin/nvcc --version; } |
            sed -n 's/.*release \([0-9.]*\).*/\1/p')"
    else
        echo "nvcc none"
    fi
    if [ -n "$PY" ]; then
        echo "python $("$PY" -c 'import platform; print(platform.python_version())') ($PY)"
    else
        echo "python none"
    fi
    if [ -n "$PY" ]; then
        echo "torch $(timeout 30 "$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>/dev/null || echo none)"
    fi
} | tee -a "$SUMMARY"
for lib in $CUDA_LIBS; do
    d=$(find_cuda_lib "$lib")
    say "cuda lib $lib: ${d:-not found}"
    [ -n "$d" ] && case ":$LDP:" in *":$d:"*) ;; *) LDP=${LDP:+$LDP:}$d ;; esac
done
export LD_LIBRARY_PATH=$LDP
say "LD_LIBRARY_PATH=$LDP"
NGPU=0
command -v nvidia-smi >/dev/null && NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
say "gpus $NGPU; budget ${BUDGET} s"
say "== checks"
# No hidden float32 emulation or TF32 from the environment.
unset CUBLAS_EMULATE_SINGLE_PRECISION NVIDIA_TF32_OVERRIDE
export CMOCKA_MESSAGE_OUTPUT=stdout
BIN=$B/bin
export B BIN SCRATCH LOGS RESULTS PY

result() { # name PASS|FAIL|SKIP detail
    case $2 in
    PASS) PASS=$((PASS + 1)) ;;
    FAIL) FAIL=$((FAIL + 1)) ;;
    *) SKIP=$((SKIP + 1)) ;;
    esac
    say "$(printf '%s %-13s %s' "$2" "$1" "$3")"
}

# check NAME LIMIT_S GPU|CPU FUNCTION: the function's exit status 0 and its
# last line decide; its whole output is LOGS/NAME.log. The function exits 0
# only on its own positive evidence (see each).
check() {
    local name=$1 t=$2 kind=$3 fn=$4
    if [ "$kind" = GPU ] && [ "$NGPU" -eq 0 ]; then
        result "$name" SKIP "no GPU (nvidia-smi lists none)"
        return
    fi
    local left=$((BUDGET - ($(date +%s) - START)))
    if [ "$left" -lt 15 ]; then
        result "$name" FAIL "no time: ${left} s left of the ${BUDGET} s budget"
        return
    fi
    [ "$t" -gt "$left" ] && t=$left
    local t0=$SECONDS rc
    timeout -k 5 "$t" bash -c "$fn" >"$LOGS/$name.log" 2>&1
    rc=$?
    local detail
    detail=$(grep -v '^$' "$LOGS/$name.log" | tail -n 1)
    if [ $rc -eq 0 ]; then
        result "$name" PASS "$detail ($((SECONDS - t0)) s)"
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        result "$name" FAIL "timed out after ${t} s (last: ${detail:-nothing})"
    else
        result "$name" FAIL "rc $rc: ${detail:-no output} ($((SECONDS - t0)) s)"
    fi
}

# cmocka evidence: exit 0, PASSED count == RUN count > 0, no FAILED line.
cmocka_ok() { # log
    local run passed
    run=$(grep -c '^\[ RUN      \]' "$1")
    passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$1" | tail -n 1)
    if [ "$run" -gt 0 ] && [ "${passed:-0}" -eq "$run" ] && ! grep -q '^\[  FAILED  \]' "$1"; then
        echo "$run of $run tests passed"
    else
        echo "cmocka: $run run, ${passed:-no} passed"
        return 1
    fi
}
# run_cmocka PROGRAM: run it, keep its output, require the evidence above.
run_cmocka() {
    local log=$SCRATCH/$(basename "$1").out rc
    "$@" >"$log" 2>&1
    rc=$?
    cat "$log"
    [ $rc -eq 77 ] && { echo "$(basename "$1"): skipped (exit 77) although required"; return 1; }
    [ $rc -eq 0 ] || { echo "$(basename "$1"): exit $rc"; return 1; }
    local msg ok
    msg=$(cmocka_ok "$log")
    ok=$?
    echo "$(basename "$1"): $msg"
    return $ok
}
export -f cmocka_ok run_cmocka

# ---- libs: every program and library loads from the bundle
libs() {
    local f bad=0
    for f in "$BIN"/* "$B"/lib/*; do # every object has its RUNPATH ($ORIGIN)
        if ldd "$f" | grep -q 'not found'; then
            echo "$f:"; ldd "$f" | grep 'not found'; bad=1
        fi
    done
    # and the loader really binds them (ldd does not resolve symbols)
    "$BIN/strata" --version || { echo "bin/strata does not start"; bad=1; }
    [ $bad -eq 0 ] && echo "$(ls "$BIN" | wc -l) programs, $(ls "$B/lib" | wc -l) libraries: every library resolved, strata starts"
    [ $bad -eq 0 ]
}
export -f libs
check libs 20 CPU libs

cpu_refs() {
    local p n=0
    for p in test_backend_ops test_backend_streams test_refresh_engine; do
        run_cmocka "$BIN/$p" || return 1
        n=$((n + 1))
    done
    echo "$n programs: backend ops vs C references, streams/events, the stream seam: all passed"
}
export -f cpu_refs
check cpu_refs 90 CPU cpu_refs

cuda_ops() { run_cmocka "$BIN/test_cuda_ops"; }
gpt_cuda() { run_cmocka "$BIN/test_gpt_cuda"; }
export -f cuda_ops gpt_cuda
check cuda_ops 60 GPU cuda_ops
check gpt_cuda 60 GPU gpt_cuda

# ---- the GPT on the GPU
DATA=$SCRATCH/corpus.txt
"${PY:-python3}" - "$DATA" <<'EOF' 2>/dev/null || true
import sys, random
random.seed(1)
words = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex".split()
with open(sys.argv[1], "w") as f:
    for i in range(20000):
        f.write(" ".join(random.choice(words) for _ in range(12)) + ".\n")
EOF
GPT="--data $DATA --layers 4 --d-model 256 --heads 4 --seq-len 128 --batch 16 --quiet --no-progress --eval-every 0"
export DATA GPT

# train NAME ARGS...: a strata run writing SCRATCH/NAME.jsonl (also logged)
train() {
    local name=$1
    shift
    "$BIN/strata" train $GPT --metrics "$LOGS/$name.jsonl" "$@" || {
        echo "strata train $name: exit $?"; return 1; }
}
export -f train

async_s0() {
    train s0_sync --steps 30 --device cuda --threads 1 &&
    train s0_async --steps 30 --device cuda --threads 1 --async --staleness 0 &&
    "$PY" - "$LOGS/s0_sync.jsonl" "$LOGS/s0_async.jsonl" <<'EOF'
import json, os, sys
def run(p):
    recs = [json.loads(l) for l in open(p)]
    steps = [r["loss"] for r in recs if r.get("type") == "step"]
    summ = [r for r in recs if r.get("type") == "summary"]
    return steps, (summ[-1].get("weights_hash") if summ else None)
(a, ha), (b, hb) = run(sys.argv[1]), run(sys.argv[2])
# Every loss and the final weights' hash must agree. Both runs use one BLAS
# thread: an async run sets BLAS to one thread (the workers take the other
# cores), and a sync run at its default thread count sums in another order.
ok = len(a) == len(b) == 30 and a == b and ha is not None and ha == hb
diff = [i + 1 for i, (x, y) in enumerate(zip(a, b)) if x != y]
print(json.dumps({"check": "async_s0", "steps": [len(a), len(b)], "first_differing_step":
                  diff[0] if diff else None, "weights_hash": [ha, hb], "ok": ok}),
      file=open(os.environ["RESULTS"], "a"))
print(f"{len(a)}/{len(b)} steps, losses {'bit-identical' if a == b else f'differ from step {diff[0] if diff else len(a)}'}, "
      f"final weights hash {'equal' if ha == hb else 'differs'} ({ha} / {hb})")
sys.exit(0 if ok else 1)
EOF
}
export -f async_s0
check async_s0 90 GPU async_s0

curve() {
    train curve_gpu --steps 20 --device cuda &&
    train curve_cpu --steps 20 --device cpu &&
    "$PY" - "$LOGS/curve_cpu.jsonl" "$LOGS/curve_gpu.jsonl" <<'EOF'
import json, os, sys
def losses(p):
    return [json.loads(l)["loss"] for l in open(p) if json.loads(l).get("type") == "step"]
c, g = losses(sys.argv[1]), losses(sys.argv[2])
rel = [abs(a - b) / abs(a) for a, b in zip(c, g)]
ok = len(c) == len(g) == 20 and rel[0] <= 1e-5 and max(rel) <= 2e-3
print("cpu", " ".join(f"{x:.6f}" for x in c))
print("gpu", " ".join(f"{x:.6f}" for x in g))
print(json.dumps({"check": "gpt_curve", "cpu": c, "gpu": g, "rel_diff": rel, "ok": ok}),
      file=open(os.environ["RESULTS"], "a"))
print(f"{len(c)}/{len(g)} steps; step 1 rel diff {rel[0] if rel else float('nan'):.2e} (<= 1e-5), "
      f"max {max(rel) if rel else float('nan'):.2e} (<= 2e-3)")
sys.exit(0 if ok else 1)
EOF
}
export -f curve
check gpt_curve 120 GPU curve

stagger() {
    train stagger_sync --steps 120 --device cuda --precondition-frequency 10 &&
    train stagger_async --steps 120 --device cuda --precondition-frequency 10 --async \
        --stagger-refresh &&
    "$PY" - "$LOGS/stagger_sync.jsonl" "$LOGS/stagger_async.jsonl" <<'EOF'
import json, os, sys
W = 10  # warm-up steps left out (review D6)
def load(p):
    recs = [json.loads(l) for l in open(p)]
    return ([r["step_ms"] for r in recs if r.get("type") == "step"],
            [r for r in recs if r.get("type") == "summary"][-1])
def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]
out = {"check": "async_stagger", "warmup_steps": W}
lines, ok = [], True
for name, p in (("sync", sys.argv[1]), ("async", sys.argv[2])):
    ms, s = load(p)
    w = ms[W:]
    f = {"steps": len(ms), "p50": pct(w, .5), "p99": pct(w, .99), "max": max(w),
         "max_all": max(ms), "ratio": max(w) / pct(w, .5), "wall_s": sum(ms) / 1e3}
    for k in ("stream_waits", "stream_wait_bytes", "stream_stages", "stream_stages_early",
              "stream_installs", "stream_snapshots", "wait_s", "critical_path_fraction",
              "stream_blocking_waits", "stream_waits_timed", "stream_waits_untimed",
              "stream_wait_s"):
        f[k] = s.get(k, 0)
    out[name] = f
    lines.append(f"{name}: p50 {f['p50']:.2f} p99 {f['p99']:.2f} max {f['max']:.2f} ms "
                 f"(max/p50 {f['ratio']:.3f}; with step 1..{W}: max {f['max_all']:.2f})")
a = out["async"]
# The training stream's waits on roots, measured with timing events (the
# engine records one on the training stream before and after every wait on
# incomplete shadow-stream work; cudaEventElapsedTime). Every blocking wait
# must have been timed, else the figure is not evidence. The byte bound (the
# waited bytes at 10 GB/s pinned H2D) is printed beside it for comparison.
a["stream_wait_fraction"] = a["stream_wait_s"] / a["wall_s"]
a["stream_wait_bound_fraction"] = a["stream_wait_bytes"] / 10e9 / a["wall_s"]
a["host_wait_fraction"] = a["wait_s"] / a["wall_s"]
timed_all = a["stream_waits_untimed"] == 0 and \
    a["stream_waits_timed"] == a["stream_blocking_waits"]
ok = a["steps"] == 120 and a["ratio"] <= 1.2 and timed_all and \
     a["stream_wait_fraction"] < 0.01 and a["host_wait_fraction"] < 0.01
out["ok"] = ok
print(json.dumps(out), file=open(os.environ["RESULTS"], "a"))
for l in lines:
    print(l)
print(f"training stream: {a['stream_blocking_waits']} blocking waits, "
      f"{a['stream_waits_timed']} timed ({a['stream_waits_untimed']} untimed): "
      f"{a['stream_wait_s'] * 1e3:.3f} ms, {100 * a['stream_wait_fraction']:.4f}% of the steps' "
      f"time (events; the byte bound at 10 GB/s: {100 * a['stream_wait_bound_fraction']:.4f}%, "
      f"{a['stream_waits']} install waits, {a['stream_wait_bytes']} B); "
      f"host waits on workers {100 * a['host_wait_fraction']:.3f}%; training thread on "
      f"second-order state (snapshots, stages, installs) "
      f"{100 * a['critical_path_fraction']:.3f}% (sync {100 * out['sync']['critical_path_fraction']:.3f}%)")
print(f"async max/p50 after {W} warm-up steps {a['ratio']:.3f} (<= 1.2), waits "
      f"{100 * max(a['stream_wait_fraction'], a['host_wait_fraction']):.3f}% (< 1%), every "
      f"blocking wait timed: {timed_all}")
sys.exit(0 if ok else 1)
EOF
}
export -f stagger
check async_stagger 120 GPU stagger

ns() {
    "$BIN/bench_cuda_device" ns >"$LOGS/ns.txt" 2>&1
    local rc=$?
    cat "$LOGS/ns.txt"
    [ $rc -eq 0 ] || { echo "bench_cuda_device ns: exit $rc"; return 1; }
    "$PY" - "$LOGS/ns.txt" <<'EOF'
import json, os, sys
rows, cur = [], None
for l in open(sys.argv[1]):
    k, _, v = l.strip().partition(" ")
    if k == "ns_shape":
        cur = {"shape": v}; rows.append(cur)
    elif cur is not None and k:
        try: cur[k] = float(v)
        except ValueError: pass
ok = bool(rows) and all("ns_ratio" in r and "gram_ns_ratio" in r for r in rows) \
     and min(r["ns_ratio"] for r in rows) >= 0.7
print(json.dumps({"check": "ns_vs_sgemm", "shapes": rows, "ok": ok}),
      file=open(os.environ["RESULTS"], "a"))
print("; ".join(f"{r['shape']}: SGEMM {r.get('sgemm_tflops', 0):.1f} NS {r.get('ns_tflops', 0):.1f} "
                f"({r.get('ns_ratio', 0):.2f}) Gram-NS {r.get('gram_ns_tflops', 0):.1f} "
                f"({r.get('gram_ns_ratio', 0):.2f}) TFLOP/s" for r in rows)
      + " (target NS >= 0.7 SGEMM)")
sys.exit(0 if ok else 1)
EOF
}
export -f ns
check ns_vs_sgemm 90 GPU ns

tiers() {
    mkdir -p "$SCRATCH/nvme"
    "$BIN/bench_cuda_device" tiers "${STRATA_NVME_DIR:-$SCRATCH/nvme}" >"$LOGS/tiers.txt" 2>&1
    local rc=$?
    cat "$LOGS/tiers.txt"
    rm -rf "$SCRATCH/nvme"
    [ $rc -eq 0 ] || { echo "bench_cuda_device tiers: exit $rc"; return 1; }
    "$PY" - "$LOGS/tiers.txt" <<'EOF'
import json, os, sys
v = {}
for l in open(sys.argv[1]):
    k, _, x = l.strip().partition(" ")
    try: v[k] = float(x)
    except ValueError: v[k] = x
need = ("cudamemcpy_h2d_gbps", "pinned_h2d_ratio", "pinned_d2h_ratio")
ok = all(isinstance(v.get(k), float) for k in need) and \
     v["pinned_h2d_ratio"] >= 0.8 and v["pinned_d2h_ratio"] >= 0.8
print(json.dumps({"check": "tiers", **v, "ok": ok}),
      file=open(os.environ["RESULTS"], "a"))
g = lambda k: v.get(k, float("nan")) if isinstance(v.get(k), float) else float("nan")
print(f"cudaMemcpy peak H2D {g('cudamemcpy_h2d_gbps'):.1f} D2H {g('cudamemcpy_d2h_gbps'):.1f} GB/s; "
      f"pinned {g('pinned_h2d_ratio'):.2f}/{g('pinned_d2h_ratio'):.2f} of peak (>= 0.8); "
      f"pageable H2D {g('pageable_h2d_gbps'):.1f}, managed {g('managed_prefetch_h2d_gbps'):.1f}, "
      f"nvme->device {g('nvme_to_device_gbps'):.1f} GB/s")
sys.exit(0 if ok else 1)
EOF
}
export -f tiers
check tiers 60 GPU tiers

# Shampoo's roots on the GPU (issue #23 item 4): F = 1 sync against F = 1
# async S = 1, both --root-method newton-f32 (the float32 coupled Newton root
# on each worker's own stream, cuBLAS; --epsilon-rel 1e-4 bounds the factors'
# condition for its float32 residual check), 60 steps of the GPU GPT, one
# BLAS thread (the workers take the other cores). Evidence: both runs end,
# most roots are Newton's (fallbacks to the host's eigh under 10%), and the
# async run's critical-path fraction is below the sync run's; crit% is
# printed against the issue's 1% goal (not the pass condition: measured here
# first).
newton_f32() {
    local dev=${NEWTON_F32_DEVICE:-cuda}
    "$BIN/strata" race $GPT --eval-every 20 --runs adamw,shampoo-f1,shampoo-f1-async-s1 \
        --steps "${NEWTON_F32_STEPS:-60}" --device "$dev" --root-method newton-f32 \
        --epsilon-rel 1e-4 --threads 1 --out "$LOGS/race_newton_f32" ||
        { echo "strata race (newton-f32): exit $?"; return 1; }
    "$PY" - "$LOGS/race_newton_f32" "$dev" <<'EOF'
import csv, json, os, sys
d, dev = sys.argv[1], sys.argv[2]
rows = list(csv.DictReader(open(os.path.join(d, "ratios.tsv")), delimiter="\t"))
def summary(name):
    p = os.path.join(d, name + ".jsonl")
    recs = [json.loads(l) for l in open(p)] if os.path.exists(p) else []
    s = [r for r in recs if r.get("type") == "summary"]
    return s[-1] if s else {}
runs = {}
for name, is_async in (("shampoo-f1", False), ("shampoo-f1-async-s1", True)):
    s = summary(name)
    r = [v for v in rows if v["optimizer"] == "shampoo" and ("async" in v["variant"]) == is_async]
    g = lambda k: float(r[0][k]) if r else None
    runs[name] = {"val_loss": g("final_val_loss"), "crit": g("critical_path_fraction"),
                  "wait_s": g("wait_s"), "wall_s": g("wall_s"),
                  "root_newton": s.get("root_newton"), "root_fallbacks": s.get("root_fallbacks"),
                  "root_refreshes": s.get("root_refreshes")}
a, b = runs["shampoo-f1"], runs["shampoo-f1-async-s1"]
def newton_ok(x):
    n, f = x["root_newton"], x["root_fallbacks"]
    return n is not None and f is not None and n > 0 and f < 0.1 * (n + f)
ok = all(x["crit"] is not None for x in (a, b)) and newton_ok(a) and newton_ok(b) and \
    b["crit"] < a["crit"]
print(json.dumps({"check": "newton_f32", "device": dev, "runs": runs, "ok": ok}),
      file=open(os.environ["RESULTS"], "a"))
f = lambda x, k, fmt: (fmt % x[k]) if x[k] is not None else "?"
print(f"shampoo F=1 newton-f32 ({dev}): sync val {f(a, 'val_loss', '%.4f')} crit "
      f"{100 * (a['crit'] or 0):.2f}% | async S=1 val {f(b, 'val_loss', '%.4f')} crit "
      f"{100 * (b['crit'] or 0):.2f}% (goal <= 1%), waits {f(b, 'wait_s', '%.3f')} s; newton "
      f"roots {a['root_newton']}/{b['root_newton']}, eigh fallbacks {a['root_fallbacks']}/"
      f"{b['root_fallbacks']}")
sys.exit(0 if ok else 1)
EOF
}
export -f newton_f32
# last: it cannot take time from the checks above
check newton_f32 80 GPU newton_f32

# ---- the results
ELAPSED=$(($(date +%s) - START))
say "elapsed ${ELAPSED} s of ${BUDGET} s"
"${PY:-python3}" - "$RESULTS" "$OUT/results.json" "$PASS" "$FAIL" "$SKIP" "$ELAPSED" <<'EOF' || true
import json, os, sys
recs = []
try:
    recs = [json.loads(l) for l in open(sys.argv[1])]
except FileNotFoundError:
    pass
json.dump({"passed": int(sys.argv[3]), "failed": int(sys.argv[4]), "skipped": int(sys.argv[5]),
           "elapsed_s": int(sys.argv[6]), "checks": {r.pop("check"): r for r in recs}},
          open(sys.argv[2], "w"), indent=1)
EOF
cp "$SUMMARY" "$LOGS/summary.txt"
tar -C "$SCRATCH" -czf "$OUT/logs.tgz" logs
say "$PASS passed, $FAIL failed, $SKIP skipped"
[ "$FAIL" -eq 0 ]
