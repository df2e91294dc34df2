#!/usr/bin/env python3
"""The config schema (runtime/config_schema.h) is the one table of strata_config
fields (issue #18 item 6): every row's `strata train` flag is presented by the
CLI through the row (CFG(id) in cli/main.c) and documented in README.md, every
row's JSONL key is written by the report through the row (SK(id) in
trainer/report.c), and no consumer spells a schema field's flag or key by
hand. Usage: check_schema.py SOURCE_ROOT. Exit 0 pass, 1 fail."""
import pathlib
import re
import sys


def main():
    root = pathlib.Path(sys.argv[1])
    schema = (root / "runtime" / "config_schema.h").read_text()
    rows = re.findall(r'X\((\w+), ([\w.\[\]]+), (\w+), (\w+), (NULL|"[^"]*"), (NULL|"[^"]*"),',
                      schema)
    if len(rows) < 50:
        print(f"FAIL runtime/config_schema.h: only {len(rows)} rows parsed")
        return 1
    cli = (root / "cli" / "main.c").read_text()
    report = (root / "trainer" / "report.c").read_text()
    readme = (root / "README.md").read_text()
    cli_ids = set(re.findall(r"CFG\((\w+)\)", cli))
    sk_ids = set(re.findall(r"SK\((\w+),", report))
    bad = []
    n_cli = n_json = 0
    for rid, path, kind, ckpt, flag, key in rows:
        if flag != "NULL":
            n_cli += 1
            name = flag.strip('"')
            if rid not in cli_ids:
                bad.append(f"{path}: flag --{name} is not presented by cli/main.c (CFG({rid}))")
            if f".name = {flag}" in cli:
                bad.append(f"{path}: cli/main.c spells --{name} by hand (use CFG({rid}))")
            if not re.search(r"--" + re.escape(name) + r"\b", readme):
                bad.append(f"{path}: flag --{name} is not in README.md")
        elif rid in cli_ids:
            bad.append(f"{path}: CFG({rid}) in cli/main.c, but the schema row has no flag")
        if key != "NULL":
            n_json += 1
            if rid not in sk_ids:
                bad.append(f"{path}: JSONL key {key} is not written by report.c (SK({rid}))")
            if re.search(r"\{" + re.escape(key) + r",", report):
                bad.append(f"{path}: report.c spells {key} by hand (use SK({rid}))")
        elif rid in sk_ids:
            bad.append(f"{path}: SK({rid}) in report.c, but the schema row has no JSONL key")
    for b in bad:
        print("FAIL " + b)
    print(f"{len(rows)} schema rows: {n_cli} with a flag, {n_json} with a JSONL key, "
          f"{sum(1 for r in rows if r[3] == 'CKPT')} recorded in checkpoints")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
