#!/usr/bin/env python3
"""No call circle between the library's files, and none between its rooms.

The include graph (check_includes.py) cannot see a call that goes up through
a declaration in a lower header (the runtime <-> checkpoint circle of the
architecture review was one). This reads the object files of the internal
static library with `nm`: a file calls another when it has an undefined
symbol that the other defines. A strongly connected set of two or more files
is a circle; so is one between folders (rooms), and so is a call from a
room into a room on a higher floor (check_includes.LEVEL).

One circle is allowed by design: the backend factory inside backend/
(backend.c creates the CPU or CUDA backend, which wraps itself through the
generic constructor in backend.c), i.e. a circle whose files all lie in
backend/.

Usage: check_calls.py LIBSTRATA_INTERNAL.a
Exit 0: no circle; 1: a circle (printed); 77: nm not found.
"""
import os
import re
import shutil
import subprocess
import sys



def source_of(obj):
    # meson names objects like libstrata_internal.a.p/.._engine_refresh.c.o
    base = obj.rsplit("/", 1)[-1]
    base = re.sub(r"\.o$", "", base)
    if not base.startswith(".._"):
        return "runtime/" + base  # the library is assembled in runtime/
    base = re.sub(r"^(\.\._)+", "", base)
    parts = base.split("_")
    # the folder is the first component; rejoin the rest (file names hold '_')
    folder, rest = parts[0], "_".join(parts[1:])
    if folder == "backend" and rest.startswith("cuda_"):
        return "backend/cuda/" + rest[len("cuda_"):]
    return folder + "/" + rest


def sccs(nodes, edges):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    if shutil.which("nm") is None:
        print("nm not found")
        return 77
    text = subprocess.run(["nm", "-A", sys.argv[1]], capture_output=True, text=True,
                          check=True).stdout
    defined, undefined = {}, {}
    for line in text.splitlines():
        m = re.match(r"^[^:]+:([^:]+):\s*(?:[0-9a-fA-F]+)?\s+([A-Za-z])\s+(\S+)$", line)
        if not m:
            continue
        src, kind, sym = source_of(m.group(1)), m.group(2), m.group(3)
        if kind in "TDRBC" and kind.isupper():
            defined.setdefault(sym, set()).add(src)
        elif kind == "U":
            undefined.setdefault(src, set()).add(sym)
    files = set(undefined) | {f for s in defined.values() for f in s}
    fedges, dedges = {}, {}
    for src, syms in undefined.items():
        for s in syms:
            for dst in defined.get(s, ()):
                if dst != src:
                    fedges.setdefault(src, set()).add(dst)
                    a, b = src.split("/")[0], dst.split("/")[0]
                    if a != b:
                        dedges.setdefault(a, set()).add(b)
    bad = 0
    for comp in sccs(files, fedges):
        if all(f.startswith("backend/") for f in comp):
            print("allowed file circle:", " <-> ".join(sorted(comp)))
            continue
        print("CIRCLE between files:", " <-> ".join(sorted(comp)))
        bad += 1
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from check_includes import LEVEL
    for a in sorted(dedges):
        for b in sorted(dedges[a]):
            if a in LEVEL and b in LEVEL and LEVEL[b] > LEVEL[a]:
                print(f"CALL UP: {a} (floor {LEVEL[a]}) calls into {b} (floor {LEVEL[b]})")
                bad += 1
    folders = {f.split("/")[0] for f in files}
    for comp in sccs(folders, dedges):
        print("CIRCLE between rooms:", " <-> ".join(sorted(comp)))
        bad += 1
    n_edges = sum(len(v) for v in fedges.values())
    print(f"{len(files)} files, {n_edges} call edges between files, "
          f"room edges: " + ", ".join(f"{a}->{b}" for a in sorted(dedges)
                                        for b in sorted(dedges[a])))
    print(f"{bad} circles")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
