#!/bin/sh
# Build the checkpoint parsers' libFuzzer target with clang (ASan + UBSan)
# and fuzz it for SECONDS (default 30) from the corpus in tests/fuzz/corpus.
# Usage: tests/fuzz/run.sh [SECONDS] [BUILD_DIR]. Exit 0: no finding; 1: a
# crash (the input is left in BUILD_DIR); 77: no clang/libFuzzer here.
set -eu
secs=${1:-30}
src=$(cd "$(dirname "$0")/../.." && pwd)
out=${2:-$src/build-fuzz}
CC=${CLANG:-clang}
command -v "$CC" >/dev/null 2>&1 || { echo "skip: $CC not found (apt-get install clang)"; exit 77; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
cflags="-g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined"
inc="-I$src -I$src/include $(pkg-config --cflags json-c)"
if ! $CC $cflags $inc -o "$out/fuzz_ckpt" "$src/tests/fuzz/fuzz_ckpt.c" \
      "$src/ckpt/ckpt_parse.c" "$src/base/status.c" $(pkg-config --libs json-c) 2>"$out/build.log"; then
    if grep -q "fuzzer" "$out/build.log"; then
        echo "skip: libFuzzer is not available for $CC (libclang-rt-dev)"; cat "$out/build.log"; exit 77
    fi
    cat "$out/build.log"; exit 1
fi
work=$(mktemp -d)
cp "$src"/tests/fuzz/corpus/* "$work"/
cd "$out"
rc=0
"$out/fuzz_ckpt" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 "$work" >"$out/fuzz.log" 2>&1 || rc=$?
tail -15 "$out/fuzz.log"
rm -rf "$work"
exit $rc
