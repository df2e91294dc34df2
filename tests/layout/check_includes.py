#!/usr/bin/env python3
"""The include graph is one-way (README.md "Inside", ARCHITECTURE.md):

    cli, bench -> trainer -> ckpt -> runtime -> engine -> plan
        -> {optim, coherence, tiers, comm} -> {backend, workers} -> base

trainer/ is product code (the installed `strata` command is built from it)
and may include internal headers; examples/ is what a user writes and may
include only the public headers (include/strata/*.h).

A file may include headers of its own component, of components below it, and
the public headers of components at or below its level (include/strata/X.h
belongs to the component that implements it). Siblings in a middle row
never include each other, and nothing below the runtime includes a runtime
header (strata/strata.h is the runtime's); runtime/runtime_internal.h is
runtime/'s alone (the checkpoint's view is runtime/state.h). Prints every
violation and exits 1 if there is one; exit 0 otherwise.

Usage: check_includes.py [SOURCE_ROOT]
"""
import os
import re
import sys

LEVEL = {"base": 0, "backend": 1, "workers": 1, "optim": 2, "coherence": 2, "tiers": 2,
         "comm": 2, "plan": 3, "engine": 4, "runtime": 5, "ckpt": 6, "trainer": 7, "cli": 8,
         "bench": 8, "examples": 8}
PUBLIC = {"status.h": "base", "types.h": "base", "backend.h": "backend", "optim.h": "optim",
          "comm.h": "comm", "strata.h": "runtime"}
INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def component_of_header(path, including_file_component, including_dir, root):
    if path.startswith("strata/"):
        name = path.split("/", 1)[1]
        return PUBLIC.get(name, "?public:" + name)
    first = path.split("/", 1)[0]
    if "/" in path and first in LEVEL:
        return first
    # relative include: the including file's own folder (or a file beside it)
    if os.path.exists(os.path.join(including_dir, path)):
        return including_file_component
    return None  # a system or generated header


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), "..", ".."))
    bad = []
    edges = set()
    files = 0
    for comp in LEVEL:
        top = os.path.join(root, comp)
        for dirpath, _, names in os.walk(top):
            for n in names:
                if not n.endswith((".c", ".h", ".cu", ".cuh", ".inc")):
                    continue
                f = os.path.join(dirpath, n)
                files += 1
                src = open(f, encoding="utf-8", errors="replace").read()
                for inc in INC.findall(src):
                    if comp == "examples" and not inc.startswith("strata/") and \
                            not os.path.exists(os.path.join(dirpath, inc)):
                        bad.append(f"{os.path.relpath(f, root)}: an example includes {inc}: "
                                   f"examples use only the public headers (strata/*.h)")
                        continue
                    dep = component_of_header(inc, comp, dirpath, root)
                    if dep is None or dep == comp:
                        continue
                    if dep.startswith("?public"):
                        bad.append(f"{os.path.relpath(f, root)}: unknown public header {inc}")
                        continue
                    edges.add((comp, dep))
                    if inc == "runtime/runtime_internal.h":
                        bad.append(f"{os.path.relpath(f, root)}: the runtime's private struct is "
                                   f"runtime/'s own (ckpt/ sees runtime/state.h)")
                    lc, ld = LEVEL[comp], LEVEL[dep]
                    if ld > lc:
                        bad.append(f"{os.path.relpath(f, root)}: {comp} (level {lc}) includes "
                                   f"{inc} of {dep} (level {ld}): upward")
                    elif ld == lc and lc in (1, 2):
                        bad.append(f"{os.path.relpath(f, root)}: {comp} includes sibling {dep} "
                                   f"({inc})")
    # public headers themselves
    pub = os.path.join(root, "include", "strata")
    for n in sorted(os.listdir(pub)):
        comp = PUBLIC.get(n)
        if comp is None:
            bad.append(f"include/strata/{n}: not assigned to a component")
            continue
        for inc in INC.findall(open(os.path.join(pub, n)).read()):
            if not inc.startswith("strata/"):
                bad.append(f"include/strata/{n}: includes internal header {inc}")
                continue
            dep = PUBLIC.get(inc.split("/", 1)[1])
            if dep and LEVEL[dep] > LEVEL[comp]:
                bad.append(f"include/strata/{n} ({comp}) includes {inc} ({dep}): upward")
    for b in bad:
        print("VIOLATION", b)
    print("component edges:", ", ".join(f"{a}->{b}" for a, b in sorted(edges)))
    print(f"{files} files checked, {len(bad)} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
