#!/usr/bin/env python3
"""Run every `strata ...` command the README shows, as written, with its steps
cut short (--steps 3, one evaluation batch) on the default model, in a
scratch folder: the README's examples must work. Paths the README invents are
given real places: my_corpus/ becomes a folder with a text file, /scratch/...
a path under the scratch folder whose parents do not exist yet.
Usage: test_readme_commands.py README.md path/to/strata"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

readme, strata = sys.argv[1], os.path.abspath(sys.argv[2])
text = open(readme).read()
commands = []
for block in re.findall(r"```sh\n(.*?)```", text, re.S):
    for line in block.splitlines():
        line = line.split("#", 1)[0].strip()
        m = re.search(r"(?:^|&&\s*)(build/cli/strata\s.*)$", line)
        if m:
            commands.append(m.group(1).strip())
failures = 0
if len(commands) < 6:
    print(f"FAIL: found only {len(commands)} strata commands in {readme}")
    sys.exit(1)

# The commands run shortened (below), so a checkpoint they name is replaced by
# the newest one written; check first that the name the README shows is one
# its own save command, run in full, keeps: a multiple of --save-every, within
# the last --keep saves of --steps (the trainer's default 300).
saves = {}
for cmd in commands:
    args = shlex.split(cmd)[1:]
    if "--save-every" in args and "--save-dir" in args:
        every = int(args[args.index("--save-every") + 1])
        steps = int(args[args.index("--steps") + 1]) if "--steps" in args else 300
        keep = int(args[args.index("--keep") + 1]) if "--keep" in args else None
        kept = list(range(every, steps + 1, every))
        saves[os.path.normpath(args[args.index("--save-dir") + 1])] = \
            set(kept[-keep:] if keep else kept)
for cmd in commands:
    for folder, step in re.findall(r"(\S+)/step-(\d+)", cmd):
        folder, step = os.path.normpath(folder), int(step)
        if folder in saves and step not in saves[folder]:
            failures += 1
            print(f"FAIL: {cmd}: the README's save command keeps only steps "
                  f"{sorted(saves[folder])} in {folder}, not {step}")

with tempfile.TemporaryDirectory() as tmp:
    corpus = os.path.join(tmp, "my_corpus")
    os.mkdir(corpus)
    with open(os.path.join(corpus, "a.txt"), "w") as f:
        for i in range(3000):
            f.write(f"Line {i}: a corpus of plain text for the README's example, {i % 17}.\n")
    def newest_checkpoint(path):
        """A README checkpoint path (runs/ckpt/step-...) -> the newest one the
        earlier, shortened commands really wrote under its folder."""
        folder = os.path.join(tmp, path if os.path.basename(path).startswith("step-") is False
                              else os.path.dirname(path))
        steps = sorted(d for d in os.listdir(folder) if d.startswith("step-")) \
            if os.path.isdir(folder) else []
        return os.path.join(folder, steps[-1]) if steps else path

    for cmd in commands:
        args = shlex.split(cmd)[1:]
        args = [a.replace("/scratch/", os.path.join(tmp, "scratch", "deep") + "/")
                for a in args]
        # Checkpoints: save after every (shortened) step; resume, inspect and
        # verify the newest one written.
        for i, a in enumerate(args):
            if a == "--save-every" and i + 1 < len(args):
                args[i + 1] = "1"
            if (a == "--resume" or (args[0] == "ckpt" and i == 2)) and i + 1 < len(args) + 1:
                j = i + 1 if a == "--resume" else i
                args[j] = newest_checkpoint(args[j])
        if args[0] == "ckpt":
            p = subprocess.run([strata, *args], cwd=tmp, capture_output=True, text=True,
                               timeout=600)
            ok = p.returncode == 0
            print(f"{'PASS' if ok else 'FAIL'}: {cmd}")
            if not ok:
                failures += 1
                print("  rc", p.returncode, "\n  stdout:", p.stdout[-600:], "\n  stderr:",
                      p.stderr[-600:])
            continue
        if "--help" not in args:
            # A resume continues past the checkpoint (saved at step 3): one more step,
            # since one already at --steps has nothing to train.
            args += ["--steps", "4" if "--resume" in args else "3", "--eval-batches", "1",
                     "--no-progress"]
            if args[0] == "sweep-staleness":
                args += ["--eval-every", "1"]
        p = subprocess.run([strata, *args], cwd=tmp, capture_output=True, text=True,
                           timeout=600)
        ok = p.returncode == 0 and ("--help" in args or "summary:" in p.stdout
                                    or "wrote " in p.stdout)
        print(f"{'PASS' if ok else 'FAIL'}: {cmd}")
        if not ok:
            failures += 1
            print("  rc", p.returncode, "\n  stdout:", p.stdout[-600:], "\n  stderr:",
                  p.stderr[-600:])
print(f"{len(commands) - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
