#!/usr/bin/env python3
"""Exports by intent: the linker version script, the shared library and the
installed headers name the same functions.

    runtime/strata.map    every exported symbol, under its version tag
                          ("local: *;" hides the rest)
    libstrata.so          what `nm -D --defined-only` lists as defined
    include/strata/*.h    every STRATA_API declaration

Every build exports the same set: the parts a build may lack (CUDA, MPI,
NCCL) have stand-ins that return STRATA_ERR_UNSUPPORTED (backend/cuda/none.c,
comm/comm_mpi_none.c, comm/comm_nccl_none.c). Prints each disagreement and
exits 1 if there is one; 77 (skip) when nm is missing; 0 otherwise.

Usage: check_exports.py SOURCE_ROOT LIBSTRATA_SO
"""
import os
import re
import shutil
import subprocess
import sys

MAP_NAME = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*;")
# STRATA_API, the return type, then the name before the first '('.
API_DECL = re.compile(r"\bSTRATA_API\b([^;{]*?)\b([A-Za-z_][A-Za-z0-9_]*)\s*\(", re.S)


def map_symbols(path):
    """Names under `global:` in the version script, and the version tags."""
    names, tags, in_global = [], [], False
    with open(path) as f:
        text = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        if re.match(r"^\s*[A-Za-z_][A-Za-z0-9_.]*\s*\{", line):
            tags.append(line.split("{")[0].strip())
            continue
        if re.match(r"^\s*global\s*:", line):
            in_global = True
            line = line.split(":", 1)[1]
        elif re.match(r"^\s*local\s*:", line):
            in_global = False
            continue
        m = MAP_NAME.match(line)
        if m and in_global:
            names.append(m.group(1))
    return names, tags


def header_symbols(inc_dir):
    out = {}
    for name in sorted(os.listdir(inc_dir)):
        if not name.endswith(".h"):
            continue
        with open(os.path.join(inc_dir, name)) as f:
            text = f.read()
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        text = re.sub(r"^\s*#.*$", "", text, flags=re.M)  # the STRATA_API definition itself
        for m in API_DECL.finditer(text):
            out.setdefault(m.group(2), []).append(name)
    return out


def library_symbols(so):
    res = subprocess.run(["nm", "-D", "--defined-only", so], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"check_exports: nm -D {so} failed: {res.stderr.strip()}")
    names = set()
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            names.add(parts[2].split("@", 1)[0])
    return names


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    root, so = sys.argv[1], sys.argv[2]
    if not shutil.which("nm"):
        print("check_exports: nm not found (binutils): skipped")
        return 77
    errors = []
    mapped, tags = map_symbols(os.path.join(root, "runtime", "strata.map"))
    declared = header_symbols(os.path.join(root, "include", "strata"))
    exported = library_symbols(so)
    if not tags:
        errors.append("runtime/strata.map: no version tag")
    dup = sorted({n for n in mapped if mapped.count(n) > 1})
    for n in dup:
        errors.append(f"runtime/strata.map: {n} listed more than once")
    for n, hs in sorted(declared.items()):
        if len(hs) > 1:
            errors.append(f"{n}: declared STRATA_API in {', '.join(hs)}")
    mapped = set(mapped)
    # The version tags themselves appear in nm -D as absolute symbols.
    exported -= set(tags)
    for n in sorted(exported - mapped):
        errors.append(f"{n}: exported by {os.path.basename(so)} but not in runtime/strata.map")
    for n in sorted(mapped - exported):
        errors.append(f"{n}: in runtime/strata.map but not exported by {os.path.basename(so)}")
    for n in sorted(mapped - set(declared)):
        errors.append(f"{n}: in runtime/strata.map but no include/strata/*.h declares it "
                      "STRATA_API")
    for n in sorted(set(declared) - mapped):
        errors.append(f"{n}: declared STRATA_API in include/strata/{declared[n][0]} but not "
                      "in runtime/strata.map")
    for e in errors:
        print("check_exports:", e)
    if errors:
        return 1
    print(f"check_exports: {len(mapped)} symbols agree (map, {os.path.basename(so)}, headers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
