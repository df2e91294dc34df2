#!/usr/bin/env python3
"""`strata` command: help, flag errors, data errors, memory refusal, and a tiny
run whose JSONL metrics parse. Usage: test_cli.py path/to/strata"""
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile

STRATA = sys.argv[1]
failures = 0


def sanitized(exe):
    """AddressSanitizer reserves terabytes of shadow address space: an address-
    space limit would kill every run of a sanitized build before main()."""
    try:
        out = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
    except OSError:
        return False
    return "libasan" in out or "libtsan" in out


SANITIZED = sanitized(STRATA)


def limit_memory():
    """Child: at most 3 GiB of address space, so a loader that reads without
    bound fails instead of pushing the machine into the OOM killer (not under
    a sanitizer; the release build's run of this test keeps the guard)."""
    if not SANITIZED:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def run(*args, expect_rc, expect_text=None, stream="stderr", reject_text=None, timeout=120,
        env=None):
    global failures
    try:
        p = subprocess.run([STRATA, *args], capture_output=True, text=True, timeout=timeout,
                           preexec_fn=limit_memory,
                           env=None if env is None else {**os.environ, **env})
    except subprocess.TimeoutExpired:
        print(f"FAIL: strata {' '.join(args)[:70]} -> still running after {timeout} s")
        failures += 1
        return None
    out = p.stderr if stream == "stderr" else p.stdout
    ok = (p.returncode == expect_rc and (expect_text is None or expect_text in out)
          and (reject_text is None or reject_text not in out))
    print(f"{'PASS' if ok else 'FAIL'}: strata {' '.join(args)[:70]} -> rc {p.returncode}")
    if not ok:
        failures += 1
        print("  expected rc", expect_rc, "and text", repr(expect_text), "without",
              repr(reject_text))
        print("  stdout:", p.stdout[-800:])
        print("  stderr:", p.stderr[-800:])
    return p


def io_uring_missing(tiny, nvme_dir):
    """The nvme tier's error when io_uring is unavailable here, else ""."""
    p = subprocess.run([STRATA, "train", *tiny, "--steps", "1", "--eval-every", "0", "--async",
                        "--tiers", "device,nvme", "--nvme-dir", nvme_dir, "--no-progress"],
                       capture_output=True, text=True, timeout=120)
    return next((ln for ln in p.stderr.splitlines() if "io_uring unavailable" in ln), "")


with tempfile.TemporaryDirectory() as tmp:
    empty = os.path.join(tmp, "empty.txt")
    open(empty, "w").close()
    short = os.path.join(tmp, "short.txt")
    with open(short, "w") as f:
        f.write("too short for a context of 64 bytes\n" * 2)
    text = os.path.join(tmp, "text.txt")
    with open(text, "w") as f:
        for i in range(400):
            f.write(f"Line {i}: the quick brown fox jumps over the lazy dog, {i * 7 % 13} times.\n")
    metrics = os.path.join(tmp, "m.jsonl")

    run("--help", expect_rc=0, expect_text="train", stream="stdout")
    # --version prints strata_version(), from the command and from train.
    import re
    for args in (("--version",), ("train", "--version")):
        p = run(*args, expect_rc=0, expect_text="strata ", stream="stdout")
        ok = p is not None and re.fullmatch(r"strata \d+\.\d+\.\d+\n", p.stdout) is not None
        print(f"{'PASS' if ok else 'FAIL'}: strata {' '.join(args)} prints the version")
        failures += not ok
    p = run("sweep-staleness", "--help", expect_rc=0, expect_text="soap or kl-shampoo",
            stream="stdout")
    # The meson log of scripts/setup.sh stays inside the build folder.
    setup = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                         "setup.sh")
    fixed_log = "/tmp/strata-meson-setup.log"
    before = os.stat(fixed_log).st_mtime if os.path.exists(fixed_log) else None
    bdir = os.path.join(tmp, "build-setup")
    sp = subprocess.run(["bash", setup, bdir, "-Dno_such_option=1"], capture_output=True,
                        text=True, timeout=300)
    after = os.stat(fixed_log).st_mtime if os.path.exists(fixed_log) else None
    ok = (sp.returncode != 0 and os.path.exists(os.path.join(bdir, "meson-setup.log"))
          and "no_such_option" in open(os.path.join(bdir, "meson-setup.log")).read()
          and "no_such_option" in sp.stderr and before == after)
    print(f"{'PASS' if ok else 'FAIL'}: scripts/setup.sh keeps its meson log in the build folder")
    failures += not ok
    run(expect_rc=2, expect_text="usage")
    # strata help COMMAND prints that command's help; ckpt's subcommands take --help.
    run("help", "train", expect_rc=0, expect_text="usage: strata train", stream="stdout")
    run("help", "race", expect_rc=0, expect_text="usage: strata race", stream="stdout")
    run("help", "ckpt", expect_rc=0, expect_text="strata ckpt verify DIR", stream="stdout")
    run("help", "fly", expect_rc=2, expect_text="unknown command 'fly'")
    for sub in ("inspect", "verify"):
        run("ckpt", sub, "--help", expect_rc=0, expect_text="usage: strata ckpt inspect DIR",
            stream="stdout")
        run("ckpt", sub, "--help", expect_rc=0, reject_text="missing file")
    run("fly", expect_rc=2, expect_text="unknown command")
    run("train", "--help", expect_rc=0, expect_text="--optimizer", stream="stdout")
    # --help comes from the flag table: groups, derived defaults, choices.
    p = run("train", "--help", expect_rc=0, expect_text="\n\nkl-shampoo:\n", stream="stdout")
    for want in ("\n\ndata and model:\n", "\n\nshampoo:\n", "\n\nmuon:\n", "\n\noutput:\n",
                 "  --precondition-frequency N|auto  steps between inverse-root (shampoo) or\n"
                 "                              eigenbasis (soap, kl-shampoo) refreshes (default\n"
                 "                              10); auto (train): the smallest the workers\n",
                 "  --grafting adam|adagrad|none  (default adam)\n",
                 "  --kl-init-factor X|auto     initial eigenvalue estimate; auto: RMS of the\n"
                 "                              first nonzero gradient (default auto)\n",
                 "  --progress / --no-progress  progress bar",
                 "  --warmup N                  linear warm-up steps (default max(steps/10, min(H,\n"
                 "                              max(steps, 20))), H the slowest second-moment\n"):
        ok = want in p.stdout
        print(f"{'PASS' if ok else 'FAIL'}: train --help has {want.strip()[:50]!r}")
        failures += not ok
    run("sweep-staleness", "--help", expect_rc=0,
        expect_text="Defaults: --values 0,1,2,5,10 --out runs/sweep, --steps 300.", stream="stdout")
    # Every help text fits 80 columns (the flags' text is wrapped to it).
    for args in (["--help"], ["train", "--help"], ["sweep-staleness", "--help"],
                 ["race", "--help"], ["plan", "--help"], ["ckpt", "--help"], ["ckpt"]):
        h = subprocess.run([STRATA, *args], capture_output=True, text=True)
        wide = [l for l in (h.stdout + h.stderr).splitlines() if len(l) > 80]
        print(f"{'PASS' if not wide else 'FAIL'}: strata {' '.join(args)} fits 80 columns {wide[:2]}")
        failures += bool(wide)
    # A flag at the end of the line without its value names itself (#12).
    run("train", "--steps", expect_rc=2, expect_text="strata: --steps needs a value",
        reject_text="unknown")
    run("train", "--steps", "3", "--lr", expect_rc=2, expect_text="--lr needs a value")
    # strata ckpt verify on a missing directory says so once.
    p = run("ckpt", "verify", os.path.join(tmp, "no-ckpt"), expect_rc=1,
            expect_text="missing file")
    ok = p is not None and p.stderr.count("missing file") == 1
    print(f"{'PASS' if ok else 'FAIL'}: ckpt verify of a missing directory reports it once")
    failures += not ok
    # The README: --device in the main flag table, --metrics creates parent
    # folders, oversubscribed ranks are slower per step.
    readme = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                               "README.md")).read()
    main_table = readme.split("| flag | meaning | default |")[1].split("\n\n")[0]
    for what, ok in (("--device in the main flag table", "| `--device cpu\\|cuda` |" in main_table),
                     ("--metrics creates parent folders",
                      "| `--metrics FILE` | JSONL metrics (missing parent folders are created)"
                      in main_table),
                     ("oversubscribed ranks are slower, measured by a named command",
                      "time-share them" in readme and "step_ms_p50" in readme
                      and "mpirun --oversubscribe" in readme)):
        print(f"{'PASS' if ok else 'FAIL'}: README: {what}")
        failures += not ok
    run("train", "--ns-method", "fast", expect_rc=2,
        expect_text="--ns-method expects auto, standard or gram, got 'fast'")
    run("train", "--muon-scale", "x", expect_rc=2,
        expect_text="--muon-scale expects shape, adamw, spectral or none, got 'x'")
    run("train", "--kl-init-factor", "0", expect_rc=2, expect_text="also accepts 'auto'")
    # Notes on flags that have no effect together (the run then fails on the data).
    nodata = ["--data", os.path.join(tmp, "nope")]
    run("train", *nodata, "--optimizer", "kl-shampoo", "--kl-form", "exact", "--async",
        expect_rc=1, reject_text="no effect")
    run("train", *nodata, "--optimizer", "kl-shampoo", "--async", expect_rc=1,
        reject_text="no effect")
    run("train", *nodata, "--optimizer", "soap", "--async", "--stagger-refresh", expect_rc=1,
        reject_text="note:")
    run("train", *nodata, "--optimizer", "muon", "--stagger-refresh", expect_rc=1,
        expect_text="--stagger-refresh spreads the inverse-root and eigenbasis refreshes of "
        "shampoo, soap and kl-shampoo; it has no effect with --optimizer muon")
    run("train", *nodata, "--optimizer", "soap", "--stagger-refresh",
        "--precondition-frequency", "1", expect_rc=1, expect_text="nothing to spread")
    run("train", *nodata, "--async", "--staleness", "20", "--steps", "20", expect_rc=1,
        expect_text="--staleness 20 >= --steps 20: no asynchronous root")
    run("train", *nodata, "--workers", "2", expect_rc=1,
        expect_text="--workers takes effect with --async")
    run("train", *nodata, "--warm-qr-tolerance", "0.2", expect_rc=1,
        expect_text="--warm-qr-tolerance sets --root-method warm-qr's (and warm-qr-f32's) "
        "check; it has no effect with --root-method eigh")
    run("train", *nodata, "--warm-qr-tolerance", "0.2", "--root-method", "warm-qr",
        expect_rc=1, reject_text="note:")
    # Every family's and every mode's flag given where it has no effect: one
    # note naming it (a note, not a refusal: README's exit classes), once.
    for args, note in [
            (["--optimizer", "muon", "--kl-form", "exact"],
             "--kl-form sets kl-shampoo's configuration; it has no effect with --optimizer muon"),
            (["--optimizer", "soap", "--grafting", "none", "--beta2", "0.9"],
             "--beta2, --grafting set shampoo's configuration"),
            (["--optimizer", "shampoo", "--dion2-fraction", "0.5"], "--dion2-fraction sets dion2's"),
            (["--optimizer", "adamw", "--ns-steps", "3"],
             "--ns-steps sets muon, normuon and dion2's"),
            (["--optimizer", "muon", "--precondition-frequency", "3"],
             "--precondition-frequency sets shampoo, soap and kl-shampoo's"),
            (["--quiet", "--progress"], "--progress has no effect with --quiet"),
            (["--sharding", "gather", "--grad-bucket-kib", "64"],
             "--sharding, --grad-bucket-kib take effect with more than one rank"),
            (["--async", "--nvme-dir", "x"], "--nvme-dir takes effect with --tiers"),
            (["--overwrite"], "--overwrite takes effect with --save-every"),
            (["--data", short, "--data-recursive"], "--data-recursive takes effect with a --data")]:
        p = run("train", *nodata, *args, expect_rc=1, expect_text=note)
        ok = p is not None and p.stderr.count("note:") == 1
        print(f"{'PASS' if ok else 'FAIL'}: train {' '.join(args)}: one note")
        failures += not ok
    run("train", *nodata, "--optimizer", "dion2", "--ns-steps", "3", "--dion2-fraction", "0.5",
        expect_rc=1, reject_text="note:")
    # --adamw-lr with --optimizer adamw is the tail's own lr, --lr the matrices': no note
    run("train", *nodata, "--optimizer", "adamw", "--lr", "0.01", "--adamw-lr", "0.002",
        expect_rc=1, reject_text="note:")
    # A value the runtime refuses is refused alone, with no note that the flag has no
    # effect (issue #22: --shard-group-size 2 on one rank printed both); the legal
    # value 1 on one rank is the note alone.
    tiny = ["--layers", "1", "--d-model", "16", "--heads", "1", "--seq-len", "8", "--batch",
            "1", "--steps", "1", "--eval-batches", "1", "--quiet"]
    run("train", *tiny, "--shard-group-size", "2", expect_rc=1,
        expect_text="shard_group_size 2 must divide the world size 1", reject_text="note:")
    run("train", *tiny, "--shard-group-size", "1", expect_rc=0,
        expect_text="--shard-group-size takes effect with more than one rank")
    run("race", *nodata, "--runs", "adamw,muon", "--staleness", "1,4", expect_rc=1,
        expect_text="--staleness takes effect with an asynchronous run")
    run("race", *nodata, "--runs", "adamw,shampoo-async", "--staleness", "1,4", expect_rc=1,
        reject_text="note:")
    run("race", *nodata, "--runs", "adamw", "--metrics", "m.jsonl", expect_rc=1,
        expect_text="--metrics has no effect on race")
    for cmd in ("race", "sweep-staleness"):
        run(cmd, *nodata, "--save-every", "2", "--save-dir", "x", expect_rc=2,
            expect_text="--save-every belongs to train")
    run("plan", "--steps", "3", "--world", "2", "--sharding", "gather", expect_rc=0,
        expect_text="--steps has no effect on a plan", reject_text="--sharding")
    # One note, not two contradictory ones: --async with Muon has no effect, so
    # nothing is said about its asynchronous roots.
    run("train", *nodata, "--optimizer", "muon", "--async", "--staleness", "3", "--steps", "3",
        expect_rc=1, expect_text="no effect with --optimizer muon",
        reject_text="no asynchronous root")
    # --keep without --save-every (or --save-after-load) contradicts them: exit 1,
    # as --save-every without --save-dir (README: 2 malformed, 1 contradiction).
    run("train", "--keep", "2", expect_rc=1, expect_text="--keep 2 prunes the checkpoints")
    run("train", "--save-every", "2", expect_rc=1, expect_text="--save-every needs --save-dir")
    run("train", "--layers", "abc", expect_rc=2, expect_text="--layers expects an integer")
    run("train", "--layers", "0", expect_rc=2, expect_text="--layers")
    run("train", "--lr", "-1", expect_rc=2, expect_text="--lr")
    run("train", "--optimizer", "sgd", expect_rc=2, expect_text="unknown optimizer 'sgd'")
    run("train", "--bogus", expect_rc=2, expect_text="unknown or incomplete option")
    run("train", "extra", expect_rc=2, expect_text="unexpected argument")
    run("train", "--d-model", "30", "--heads", "4", expect_rc=1,
        expect_text="divisible")
    run("train", "--data", os.path.join(tmp, "nope"), expect_rc=1, expect_text="STRATA_ERR_IO")
    run("train", "--data", empty, expect_rc=1, expect_text="STRATA_ERR_DATA")
    run("train", "--data", short, "--seq-len", "64", expect_rc=1, expect_text="STRATA_ERR_DATA")
    run("train", "--data", text, "--layers", "200", "--d-model", "16384", "--heads", "128",
        expect_rc=1, expect_text="STRATA_ERR_NOMEM")
    # --data on anything: only regular files (and directories of them) are read.
    fifo = os.path.join(tmp, "fifo")
    os.mkfifo(fifo)
    run("train", "--data", fifo, expect_rc=1, expect_text="is a FIFO; the corpus must be a "
        "regular file", timeout=20)
    for dev in ("/dev/zero", "/dev/urandom"):
        run("train", "--data", dev, expect_rc=1, expect_text="is a character device", timeout=20)
    link = os.path.join(tmp, "zero-link")
    os.symlink("/dev/zero", link)
    run("train", "--data", link, expect_rc=1, expect_text="is a character device", timeout=20)
    sparse = os.path.join(tmp, "sparse.txt")
    with open(sparse, "wb") as f:
        f.truncate(2 << 30)  # 2 GiB of holes: nothing on disk
    run("train", "--data", sparse, "--memory-limit-mib", "512", expect_rc=1,
        expect_text="the most the memory limit leaves for it", timeout=20)
    bins = os.path.join(tmp, "bins")
    os.mkdir(bins)
    for b in ("/bin/ls", "/bin/cat", "/bin/sh"):
        shutil.copy(b, bins)
    os.mkfifo(os.path.join(bins, "fifo"))  # skipped, never opened
    tiny_run = ["--layers", "1", "--d-model", "16", "--heads", "2", "--seq-len", "16",
                "--batch", "2", "--steps", "1", "--eval-batches", "1", "--quiet"]
    run("train", "--data", bins, *tiny_run, expect_rc=0, expect_text="of the corpus " + bins +
        " is text", timeout=60)
    run("train", "--data", text, *tiny_run, expect_rc=0, reject_text="warning", timeout=60)
    run("train", "--data", text, "--memory-limit-mib", "1", expect_rc=1,
        expect_text="but --memory-limit-mib allows 0.00 GiB", reject_text="available")
    # --device cuda without a GPU (or without CUDA built in): a clear
    # STRATA_ERR_UNSUPPORTED naming the way out, exit 1, never a crash. Where a
    # GPU is present the run trains instead (scripts/device-check.sh covers it).
    run("train", "--device", "gpu", expect_rc=2, expect_text="--device expects cpu or cuda")
    probe = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True) \
        if any(os.access(os.path.join(d, "nvidia-smi"), os.X_OK)
               for d in os.environ.get("PATH", "").split(os.pathsep)) else None
    if probe is None or probe.returncode != 0 or "GPU" not in probe.stdout:
        p = run("train", "--data", text, "--device", "cuda", "--steps", "2", "--seq-len", "16",
                expect_rc=1, expect_text="STRATA_ERR_UNSUPPORTED")
        for want in ("cuda", "--device cpu"):
            ok = want in p.stderr and "Traceback" not in p.stderr
            print(f"{'PASS' if ok else 'FAIL'}: --device cuda without a GPU says {want!r}")
            failures += not ok
    run("train", "--data", text, "--metrics", "/proc/strata-no-such/dir/m.jsonl",
        expect_rc=1, expect_text="cannot write metrics")

    # Counts and grammar: one file, one step; the actual thread counts in the
    # JSONL (also when automatic); --workers past the cores is worth a warning.
    p = run("train", "--data", text, "--layers", "1", "--d-model", "16", "--heads", "2",
            "--seq-len", "16", "--batch", "2", "--steps", "1", "--eval-batches", "1",
            "--metrics", metrics, "--no-progress", expect_rc=0, expect_text="(1 file, ",
            stream="stdout")
    ok = p is not None and "| 1 step in " in p.stdout
    try:
        recs = [json.loads(line) for line in open(metrics)]
        ok = ok and recs[0]["blas_threads"] >= 1
        ok = ok and all(k in recs[-1] for k in ("opt_ms_p50", "opt_ms_max", "step_ms_p50"))
    except Exception as e:  # noqa: BLE001
        print("  metrics error:", e)
        ok = False
    print(f"{'PASS' if ok else 'FAIL'}: 1 file, 1 step, blas_threads and opt_ms in the JSONL")
    failures += not ok

    # The OpenBLAS core (issue #13): reported in the header, summary and JSONL.
    # OpenBLAS's generic fallback (emulated with a test knob that makes a set
    # OPENBLAS_CORETYPE count as OpenBLAS's own detection) makes the CLI run
    # again on the best core the CPU supports; a core the user set is kept,
    # with a warning that names the remedy.
    # The binary's architecture, not this interpreter's: the arm64 suite runs
    # an aarch64 strata under qemu from an x86_64 Python.
    with open(STRATA, "rb") as exe:
        elf = exe.read(20)
    machine = int.from_bytes(elf[18:20], "little") if elf[:4] == b"\x7fELF" else None
    generic = {0x3E: "Prescott", 0xB7: "armv8"}.get(machine)
    # A -Dblas=blis build has no core to re-execute for: BLIS picks its arch
    # itself (blas_core_source "blis", the arch in the summary's blas line).
    try:
        c = json.loads(open(metrics).readline())
        if c["blas_core_source"] == "blis":
            generic = None
            ok = c["blas_core"] != "" and c["blas_core_from"] is None
            print(f"{'PASS' if ok else 'FAIL'}: a BLIS build reports BLIS's arch "
                  f"({c['blas_core']}) and skips the OpenBLAS core re-execution")
            failures += not ok
    except Exception as e:  # noqa: BLE001
        print("  metrics error:", e)
        failures += 1
    tiny1 = ["--data", text, "--layers", "1", "--d-model", "16", "--heads", "2", "--seq-len",
             "16", "--batch", "2", "--steps", "1", "--eval-batches", "1", "--no-progress"]
    if generic:
        p = run("train", *tiny1, "--metrics", metrics, expect_rc=0, stream="stdout",
                expect_text="blas: OpenBLAS core ",
                env={"OPENBLAS_CORETYPE": generic, "STRATA_TEST_BLAS_CORETYPE_AS_DETECTED": "1"})
        try:
            recs = [json.loads(line) for line in open(metrics)]
            c = recs[0]
            if c["blas_core_source"] == "strata":
                ok = (c["blas_core_from"] == generic and c["blas_core"].lower() != generic.lower()
                      and recs[-1]["blas_core"] == c["blas_core"]
                      and f"chosen by strata over OpenBLAS's generic {generic}" in p.stdout)
            else:  # a CPU with nothing better than the generic kernels
                ok = c["blas_core_source"] == "openblas" and c["blas_core_from"] is None
                print("  note: this CPU supports no core better than", generic)
        except Exception as e:  # noqa: BLE001
            print("  metrics error:", e)
            ok = False
        print(f"{'PASS' if ok else 'FAIL'}: generic {generic} core -> re-executed on a better one")
        failures += not ok
        p = run("train", *tiny1, "--metrics", metrics, expect_rc=0, env={"OPENBLAS_CORETYPE": generic})
        try:
            c = json.loads(open(metrics).readline())
            ok = (p is not None and c["blas_core"].lower() == generic.lower()
                  and c["blas_core_source"] == "user"
                  and (c["blas_core_from"] is None)
                  and (("set OPENBLAS_CORETYPE=" in p.stderr) == (p.stdout.find("this CPU supports") >= 0)))
        except Exception as e:  # noqa: BLE001
            print("  metrics error:", e)
            ok = False
        print(f"{'PASS' if ok else 'FAIL'}: OPENBLAS_CORETYPE={generic} set by the user is kept")
        failures += not ok
    p = run("train", "--data", text, "--layers", "1", "--d-model", "16", "--heads", "2",
            "--seq-len", "16", "--batch", "2", "--steps", "4", "--eval-batches", "1",
            "--precondition-frequency", "2", "--async", "--metrics", metrics, "--no-progress",
            expect_rc=0, expect_text="async: S=1", stream="stdout")
    try:
        recs = [json.loads(line) for line in open(metrics)]
        cores = os.cpu_count() or 1
        ok = (recs[0]["workers"] == max(1, cores - 1) and recs[0]["blas_threads"] == 1
              and recs[-1]["installs"] >= 1 and "dropped" in recs[-1]
              and recs[-1]["staleness_bound"] == 2)
    except Exception as e:  # noqa: BLE001
        print("  metrics error:", e)
        ok = False
    print(f"{'PASS' if ok else 'FAIL'}: async JSONL: actual workers, installs and dropped")
    failures += not ok
    run("train", *nodata, "--async", "--workers", str((os.cpu_count() or 1) + 1), expect_rc=1,
        expect_text="exceeds the")

    # --metrics creates missing parent directories.
    nested = os.path.join(tmp, "runs", "deep", "m.jsonl")
    run("train", "--data", text, "--layers", "1", "--d-model", "16", "--heads", "2",
        "--seq-len", "16", "--batch", "2", "--steps", "2", "--eval-every", "0",
        "--eval-batches", "1", "--metrics", nested, "--quiet", expect_rc=0,
        expect_text="summary:", stream="stdout")
    run("sweep-staleness", "--optimizer", "muon", expect_rc=2, expect_text="applies to shampoo, soap and kl-shampoo")

    for opt in ("adamw", "shampoo", "muon", "soap", "kl-shampoo"):
        p = run("train", "--data", text, "--optimizer", opt, "--layers", "1", "--d-model", "16",
                "--heads", "2", "--seq-len", "16", "--batch", "4", "--steps", "6",
                "--eval-every", "3", "--eval-batches", "2", "--precondition-frequency", "2",
                "--metrics", metrics, "--no-progress", expect_rc=0,
                expect_text="summary:", stream="stdout")
        try:
            recs = [json.loads(line) for line in open(metrics)]
            steps = [r for r in recs if r["type"] == "step"]
            ok = (recs[0]["type"] == "config" and recs[-1]["type"] == "summary"
                  and len(steps) == 6 and [r["step"] for r in steps] == list(range(1, 7))
                  and sum("val_loss" in r for r in steps) == 2
                  and recs[-1]["optimizer"] == opt)
            # Shampoo's inverse roots and SOAP's and KL-Shampoo's eigenbases are
            # refreshed every 2 steps; AdamW and Muon have nothing to refresh.
            cfg = recs[0]
            if opt in ("shampoo", "soap", "kl-shampoo"):
                ok = (ok and recs[-1]["root_refreshes"] > 0
                      and cfg["precondition_frequency"] == 2 and cfg["stagger_refresh"] is False)
                if opt == "shampoo":
                    ok = ok and cfg["grafting"] == "adam" and "inverse roots" in p.stdout
                else:
                    ok = ok and "eigenbasis refreshes" in p.stdout
            else:  # neither roots nor eigenbases: no refresh settings, no refresh count
                ok = (ok and recs[-1]["root_refreshes"] == 0
                      and "precondition_frequency" not in cfg and "stagger_refresh" not in cfg
                      and "failed)" not in p.stdout)
            ok = ok and cfg["async"] is False and "staleness" not in cfg
        except Exception as e:  # noqa: BLE001 - any parse problem is a failure
            print("  metrics error:", e)
            ok = False
        print(f"{'PASS' if ok else 'FAIL'}: metrics JSONL for {opt}")
        failures += not ok

    # A finite blow-up is divergence: exit 1 with the step named, whatever the optimizer.
    # The metrics still end with the summary record, which says it diverged.
    for opt in ("adamw", "shampoo", "muon", "soap", "kl-shampoo"):
        if os.path.exists(metrics):
            os.remove(metrics)
        run("train", "--data", text, "--optimizer", opt, "--layers", "1", "--d-model", "16",
            "--heads", "2", "--seq-len", "16", "--batch", "4", "--steps", "8", "--eval-batches",
            "1", "--lr", "100", "--adamw-lr", "100", "--no-progress", "--metrics", metrics,
            expect_rc=1, expect_text="STRATA_ERR_NONFINITE: training diverged at step ")
        try:
            recs = [json.loads(line) for line in open(metrics)]
            last = recs[-1]
            ok = (last["type"] == "summary" and last["diverged"] is True
                  and last["steps"] == sum(r["type"] == "step" for r in recs) < 8)
        except Exception as e:  # noqa: BLE001 - a missing file or record is a failure
            print("  metrics error:", e)
            ok = False
        print(f"{'PASS' if ok else 'FAIL'}: {opt}: a diverged run's metrics end with a summary "
              f"record marked diverged")
        failures += not ok

    # KL-Shampoo's exact form refreshes its eigenbases on workers with --async.
    p = run("train", "--data", text, "--optimizer", "kl-shampoo", "--kl-form", "exact", "--async",
            "--layers", "1", "--d-model", "16", "--heads", "2", "--seq-len", "16", "--batch", "4",
            "--steps", "4", "--eval-every", "0", "--eval-batches", "1",
            "--precondition-frequency", "2", "--metrics", metrics, "--no-progress",
            expect_rc=0, expect_text="eigenbasis refreshes (0 failed)", stream="stdout")
    try:
        cfg = json.loads(open(metrics).readline())
        ok = (cfg["kl_form"] == "exact" and cfg["async"] is True and "staleness" in cfg
              and cfg["precondition_frequency"] == 2 and cfg["kl_init_factor"] == "auto"
              and "(exact form)" in p.stdout and "async: S=" in p.stdout)
    except Exception as e:  # noqa: BLE001
        print("  metrics error:", e)
        ok = False
    print(f"{'PASS' if ok else 'FAIL'}: kl-shampoo exact form with --async runs on workers")
    failures += not ok

    # Asynchronous runtime flags.
    run("train", "--tiers", "gpu", expect_rc=2, expect_text="--tiers expects")
    run("train", "--install-mode", "lazy", expect_rc=2, expect_text="--install-mode expects")
    run("train", "--staleness", "-1", expect_rc=2, expect_text="--staleness")
    run("train", "--values", "1,2", expect_rc=2, expect_text="--values belongs to sweep-staleness")
    run("sweep-staleness", "--values", "1,x", expect_rc=2, expect_text="--values expects")
    tiny = ["--data", text, "--layers", "1", "--d-model", "16", "--heads", "2", "--seq-len", "16",
            "--batch", "4", "--precondition-frequency", "2", "--eval-batches", "2"]
    # A bad --resume path fails before the run header; --metrics creates its
    # missing parent folders.
    run("train", *tiny, "--steps", "1", "--resume", os.path.join(tmp, "no-ckpt"),
        expect_rc=1, expect_text="--resume", stream="stderr")
    p = run("train", *tiny, "--steps", "1", "--resume", os.path.join(tmp, "no-ckpt"),
            expect_rc=1, reject_text="strata train:", stream="stdout")
    # A changed --lr on resume is compared for the optimizer the run uses only.
    ck_lr = os.path.join(tmp, "ck-lr")
    run("train", *tiny, "--steps", "2", "--eval-every", "0", "--save-every", "2", "--save-dir",
        ck_lr, "--quiet", expect_rc=0)
    run("train", *tiny, "--steps", "3", "--eval-every", "0", "--resume", ck_lr, "--lr", "0.01",
        "--quiet", expect_rc=0, expect_text="config 'shampoo.lr' was", reject_text="muon.lr")
    # Resuming a checkpoint already at --steps says there is nothing to train
    # (no summary of zero steps with NaN losses).
    p = run("train", *tiny, "--steps", "2", "--resume", ck_lr, "--no-progress", expect_rc=0,
            expect_text="the checkpoint is at step 2 and --steps is 2: nothing to train")
    ok = p is not None and "nan" not in p.stdout and "| 0 steps" not in p.stdout
    print(f"{'PASS' if ok else 'FAIL'}: resume at --steps prints no NaN summary")
    failures += not ok
    # A host budget too small for the roots without an nvme tier does not
    # speak of nvme as if it were enabled, and names the way out.
    run("train", *tiny, "--layers", "2", "--d-model", "64", "--steps", "2", "--async",
        "--host-budget-mib", "1", "--quiet", expect_rc=1,
        expect_text="there is no nvme tier to spill them to", reject_text="every spillable")
    run("train", *tiny, "--layers", "2", "--d-model", "64", "--steps", "2", "--async",
        "--host-budget-mib", "1", "--quiet", expect_rc=1,
        expect_text="--tiers device,host,nvme")
    deep = os.path.join(tmp, "made", "by", "metrics", "m.jsonl")
    run("train", *tiny, "--steps", "1", "--eval-every", "0", "--metrics", deep, "--quiet",
        expect_rc=0)
    ok = os.path.exists(deep) and json.loads(open(deep).read().splitlines()[-1])["type"] == "summary"
    print(f"{'PASS' if ok else 'FAIL'}: --metrics creates its parent folders")
    failures += not ok
    nvme_dir = os.path.join(tmp, "nvme")
    # Without io_uring (qemu-user, a seccomp profile, io_uring_disabled) the
    # nvme tier cannot open: its runs are skipped, saying why.
    nvme_skip = io_uring_missing(tiny, os.path.join(tmp, "nvme-probe"))
    if nvme_skip:
        print(f"SKIP: the async nvme runs: {nvme_skip}")
    else:
        p = run("train", *tiny, "--steps", "8", "--eval-every", "4", "--async", "--staleness",
                "2", "--tiers", "device,nvme", "--nvme-dir", nvme_dir, "--metrics", metrics,
                "--no-progress", expect_rc=0, expect_text="async: S=2 fixed", stream="stdout")
        try:
            recs = [json.loads(line) for line in open(metrics)]
            steps = [r for r in recs if r["type"] == "step"]
            ok = (all("waits" in r and "max_staleness" in r and "nvme_bytes" in r for r in steps)
                  and max(r["max_staleness"] for r in steps) <= 2 - 1 + 2
                  and steps[-1]["nvme_bytes_written"] > 0 and recs[-1]["async"] is True)
        except Exception as e:  # noqa: BLE001
            print("  metrics error:", e)
            ok = False
        print(f"{'PASS' if ok else 'FAIL'}: async nvme metrics")
        failures += not ok
    run("train", "--nvme-queue-depth", "4", expect_rc=2, expect_text="--nvme-queue-depth")
    run("train", "--nvme-staging-kib", "6", expect_rc=2,
        expect_text="--nvme-staging-kib expects a multiple of 4, got 6")
    if not nvme_skip:
        run("train", *tiny, "--steps", "4", "--eval-every", "0", "--async", "--tiers",
            "device,nvme", "--nvme-dir", nvme_dir, "--nvme-queue-depth", "8", "--metrics", metrics,
            "--no-progress", expect_rc=0, expect_text="nvme tier", stream="stdout")
        try:
            recs = [json.loads(line) for line in open(metrics)]
            ok = recs[-2]["nvme_bytes_written"] > 0
        except Exception as e:  # noqa: BLE001
            print("  metrics error:", e)
            ok = False
        print(f"{'PASS' if ok else 'FAIL'}: --nvme-queue-depth 8 run")
        failures += not ok
        # The staging chunk: a multiple of 4 KiB, a usage error naming the flag (exit 2), and a
        # run with 64 KiB chunks moves roots through the nvme tier.
        run("train", *tiny, "--steps", "4", "--eval-every", "0", "--async", "--tiers",
            "device,nvme", "--nvme-dir", nvme_dir, "--nvme-staging-kib", "64", "--metrics", metrics,
            "--no-progress", expect_rc=0, expect_text="nvme tier", stream="stdout")
        try:
            recs = [json.loads(line) for line in open(metrics)]
            ok = recs[-2]["nvme_bytes_written"] > 0
        except Exception as e:  # noqa: BLE001
            print("  metrics error:", e)
            ok = False
        print(f"{'PASS' if ok else 'FAIL'}: --nvme-staging-kib 64 run")
        failures += not ok
    # The critical path (the training thread's time on second-order state): the
    # steps' critical_ms sum to the summary's critical_path_s, which is that
    # fraction of the steps' time; synchronous Shampoo's holds its inline roots
    # (> 0), AdamW has none (0), and the summary prints it beside max/median.
    def critical(*extra):
        p = run("train", *tiny, "--steps", "8", "--eval-every", "4", "--metrics", metrics,
                "--no-progress", *extra, expect_rc=0, stream="stdout")
        recs = [json.loads(line) for line in open(metrics)]
        steps = [r for r in recs if r["type"] == "step"]
        summ = recs[-1]
        total = sum(r["critical_ms"] for r in steps) / 1e3
        wall = sum(r["step_ms"] for r in steps) / 1e3
        consistent = (abs(total - summ["critical_path_s"]) <= 1e-9 + 1e-9 * total
                      and abs(summ["critical_path_fraction"] - total / wall) <= 1e-6
                      and abs(summ["wall_s"] - wall) <= 1e-6)
        return p, steps, summ, consistent
    try:
        p, steps, summ, ok = critical()
        ok = ok and summ["critical_path_s"] > 0 and p is not None and "critical path: " in p.stdout
        refresh_steps = [r for r in steps if r["roots_ms"] > 0]
        ok = ok and all(r["critical_ms"] >= r["roots_ms"] - 1e-9 for r in refresh_steps)
        p, steps, summ, ok2 = critical("--async", "--stagger-refresh")
        ok = ok and ok2 and "critical path: " in p.stdout
        p, steps, summ, ok3 = critical("--optimizer", "adamw")
        ok = ok and ok3 and summ["critical_path_s"] == 0 and "critical path" not in p.stdout
        # SOAP's and KL-Shampoo's first eigenbasis is computed inside the
        # family's step 1 on the training thread: on the critical path too.
        for opt in ("soap", "kl-shampoo"):
            p, steps, summ, ok4 = critical("--optimizer", opt)
            ok = (ok and ok4 and steps[0]["roots_ms"] > 0 and
                  all(r["critical_ms"] >= r["roots_ms"] - 1e-9 for r in steps))
            if not ok:
                print(f"  {opt}: step 1 roots_ms {steps[0]['roots_ms']:.3f} critical_ms "
                      f"{steps[0]['critical_ms']:.3f}")
    except Exception as e:  # noqa: BLE001
        print("  critical path error:", e)
        ok = False
    print(f"{'PASS' if ok else 'FAIL'}: critical path in the JSONL and the summary")
    failures += not ok
    # The sweep's plot names the optimizer it swept.
    sweep_soap = os.path.join(tmp, "sweep-soap")
    run("sweep-staleness", *tiny, "--optimizer", "soap", "--steps", "2", "--eval-every", "1",
        "--values", "0", "--out", sweep_soap, expect_rc=0, expect_text="wrote", stream="stdout")
    try:
        gp = open(os.path.join(sweep_soap, "loss_vs_time.gp")).read()
        ok = "soap sync and async" in gp and "Shampoo" not in gp
    except Exception as e:  # noqa: BLE001
        print("  sweep error:", e)
        ok = False
    print(f"{'PASS' if ok else 'FAIL'}: sweep plot title names soap")
    failures += not ok
    sweep_dir = os.path.join(tmp, "sweep")
    run("sweep-staleness", *tiny, "--steps", "6", "--eval-every", "3", "--values", "0,2",
        "--out", sweep_dir, expect_rc=0, expect_text="wrote", stream="stdout")
    try:
        rows = open(os.path.join(sweep_dir, "sweep.tsv")).read().splitlines()
        ok = (rows[0].startswith("run\tS\tval_loss") and [r.split("\t")[0] for r in rows[1:]]
              == ["sync", "S0", "S2"])
        # S=0 reproduces the synchronous path bit for bit: same validation loss.
        ok = ok and rows[1].split("\t")[2] == rows[2].split("\t")[2]
        png = os.path.join(sweep_dir, "loss_vs_time.png")
        if os.path.exists("/usr/bin/gnuplot"):
            ok = ok and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    except Exception as e:  # noqa: BLE001
        print("  sweep error:", e)
        ok = False
    print(f"{'PASS' if ok else 'FAIL'}: sweep-staleness table and plot")
    failures += not ok

    # strata race: run-list errors come before any training; a tiny race writes the
    # curves (race.tsv), the per-run ratios (ratios.tsv, AdamW first whatever the
    # list's order) and the plot, and every ratio follows from the curves.
    run("race", "--runs", "muon,shampoo", expect_rc=2, expect_text="must include adamw")
    run("race", "--runs", "adamw,muon-async", expect_rc=2, expect_text="'muon-async'")
    run("race", "--runs", "adamw,sgd", expect_rc=2, expect_text="unknown optimizer 'sgd'")
    run("race", "--runs", "adamw,muon,muon", expect_rc=2, expect_text="listed twice")
    run("race", "--staleness", "1,x", expect_rc=2, expect_text="--staleness expects")
    # SOAP with S >= F (issue 23: several eigenbasis refreshes of a block in
    # flight, each continuing the one before it) is accepted.
    p = run("train", *tiny, "--steps", "4", "--optimizer", "soap", "--async", "--staleness",
            "2", "--precondition-frequency", "1", expect_rc=0)
    ok = p is not None and "summary:" in p.stdout
    print(f"{'PASS' if ok else 'FAIL'}: train soap --async F=1 S=2 runs")
    failures += not ok
    run("race", "--values", "1", expect_rc=2, expect_text="belongs to sweep-staleness")
    run("train", "--runs", "adamw", expect_rc=2, expect_text="belongs to race")
    run("race", "--help", expect_rc=0, expect_text="usage: strata race", stream="stdout")
    race_dir = os.path.join(tmp, "race")
    p = run("race", *tiny, "--steps", "6", "--eval-every", "2", "--runs",
            "shampoo,adamw,shampoo-async", "--staleness", "0,3", "--out", race_dir, expect_rc=0,
            expect_text="target: AdamW's final validation loss", stream="stdout")
    try:
        rows = [r.split("\t") for r in open(os.path.join(race_dir, "race.tsv")).read().splitlines()]
        ok = rows[0] == ["optimizer", "variant", "step", "wall_s", "val_loss"]
        curves = {}
        for opt, variant, step, wall, val in rows[1:]:
            curves.setdefault((opt, variant), []).append((int(step), float(wall), float(val)))
        runs = [("adamw", "-"), ("shampoo", "sync"), ("shampoo", "async-S0-staggered"),
                ("shampoo", "async-S3-staggered")]
        ok = ok and sorted(curves) == sorted(runs)
        ok = ok and all([s for s, _, _ in c] == [2, 4, 6] for c in curves.values())
        ok = ok and all(c[0][1] <= c[1][1] <= c[2][1] for c in curves.values())
        ratios = [r.split("\t") for r in open(os.path.join(race_dir, "ratios.tsv")).read().splitlines()]
        ok = ok and ratios[0][:6] == ["optimizer", "variant", "final_val_loss", "wall_s", "reach_s",
                                      "ratio_to_adamw"] and ratios[0][8] == "reach_step"
        # each run's peak lrs: AdamW's tail follows its lr, the others' are the
        # trainer's per-optimizer tail defaults
        ok = ok and ratios[0][11:13] == ["lr", "tail_lr"]
        ok = ok and all(float(r[11]) > 0 and float(r[12]) > 0 for r in ratios[1:])
        ok = ok and ratios[1][11] == ratios[1][12]
        ok = ok and [tuple(r[:2]) for r in ratios[1:]] == [runs[0], runs[1], runs[2], runs[3]]
        target = curves[("adamw", "-")][-1][2]
        base = float(ratios[1][3])
        ok = ok and float(ratios[1][2]) == target and abs(base - curves[("adamw", "-")][-1][1]) < 1e-5
        for r in ratios[1:]:
            c = curves[(r[0], r[1])]
            ok = ok and float(r[2]) == c[-1][2]  # final validation loss: the last row
            reach = next(((s, w) for s, w, v in c if v <= target), None)
            if reach is None:
                ok = ok and r[4] == "-" and r[5] == "-" and r[8] == "-"
            else:
                # ratios.tsv's ratio is of the unrounded times; base and reach are
                # printed to 1e-6 s, which on a run of ~1 ms moves their ratio by
                # up to 5e-7 (1 + ratio) / base
                tol = 1e-4 + 1e-6 * (1 + reach[1] / base) / base
                ok = ok and abs(float(r[4]) - reach[1]) < 1e-5 and abs(float(r[5]) - reach[1] / base) < tol
                ok = ok and int(r[8]) == reach[0]  # the step of that first validation
            name = r[0] if r[1] in ("-", "sync") else f"{r[0]}-async-{r[1].split('-')[1]}"
            ok = ok and name in p.stdout and os.path.exists(os.path.join(race_dir, name + ".jsonl"))
        ok = ok and ratios[1][4] != "-"  # AdamW reaches its own final loss
        if os.path.exists("/usr/bin/gnuplot"):
            png = os.path.join(race_dir, "loss_vs_time.png")
            ok = ok and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    except Exception as e:  # noqa: BLE001
        print("  race error:", e)
        ok = False
    print(f"{'PASS' if ok else 'FAIL'}: race table, ratios and plot")
    failures += not ok

    # The race's entries NAME[-fF][-async[-sS]][-valve] (issue 23): refusals
    # before any training, then a tiny race at F = 1 whose S = 0 run equals
    # the synchronous F = 1 run (bit-identity: F applies to both) and whose
    # runs carry F, S and the valve's settings into their JSONL.
    for runs_arg, want in (("adamw,soap-f1-async-s1-valve", "applies to Shampoo"),
                           ("adamw,shampoo-s1", "-sS needs -async"),
                           ("adamw,shampoo-valve", "-valve needs -async"),
                           ("adamw,muon-f1", "refreshes nothing"),
                           ("adamw,shampoo-f0", "1 <= F"),
                           ("adamw,shampoo-async-s1,shampoo-async-S1", "listed twice")):
        run("race", "--runs", runs_arg, expect_rc=2, expect_text=want)
    fresh_dir = os.path.join(tmp, "race-fresh")
    p = run("race", *tiny, "--steps", "3", "--eval-every", "1", "--runs",
            "adamw,shampoo-f1,shampoo-f1-async-s0,shampoo-f1-async-s1,"
            "shampoo-f1-async-s1-valve,soap-f1-async-s1", "--out", fresh_dir, expect_rc=0,
            expect_text="largest gap to", stream="stdout")
    try:
        ratios = [r.split("\t") for r in open(os.path.join(fresh_dir, "ratios.tsv")).read().splitlines()]
        ok = ratios[0][6] == "critical_path_fraction" and ratios[0][10] == "wait_s"
        variants = [tuple(r[:2]) for r in ratios[1:]]
        ok = ok and variants == [("adamw", "-"), ("shampoo", "sync-F1"), ("shampoo", "async-F1-S0"),
                                 ("shampoo", "async-F1-S1"), ("shampoo", "async-F1-S1-valve-eps1e-4"),
                                 ("soap", "async-F1-S1")]
        ok = ok and ratios[2][2] == ratios[3][2]  # S = 0 at F = 1: the synchronous F = 1 result
        def config(name):
            with open(os.path.join(fresh_dir, name + ".jsonl")) as f:
                return json.loads(f.readline())
        c = config("shampoo-f1-async-s1-valve")
        ok = ok and (c["precondition_frequency"] == 1 and c["staleness"] == 1 and c["async"]
                     and c["stale_correction"] == "newton" and c["epsilon"] >= 1e-4)
        c = config("soap-f1-async-s1")
        ok = ok and c["precondition_frequency"] == 1 and c["staleness"] == 1 and c["async"]
        ok = ok and config("shampoo-f1")["precondition_frequency"] == 1
    except Exception as e:  # noqa: BLE001
        print("  race error:", e)
        ok = False
    print(f"{'PASS' if ok else 'FAIL'}: race entries at F = 1 (sync, async S, valve)")
    failures += not ok
    # sweep-staleness at F = 1: S = 0 equals sync, crit% in the table.
    sweep_f1 = os.path.join(tmp, "sweep-f1")
    p = run("sweep-staleness", *tiny, "--precondition-frequency", "1", "--steps", "3",
            "--eval-every", "1", "--values", "0,1", "--out", sweep_f1, expect_rc=0,
            expect_text="precondition frequency F = 1", stream="stdout")
    try:
        rows = [r.split("\t") for r in open(os.path.join(sweep_f1, "sweep.tsv")).read().splitlines()]
        ok = rows[0][-1] == "critical_path_fraction" and [r[0] for r in rows[1:]] == ["sync", "S0", "S1"]
        ok = ok and rows[1][2] == rows[2][2] and "crit%" in p.stdout and "largest gap to" in p.stdout
    except Exception as e:  # noqa: BLE001
        print("  sweep error:", e)
        ok = False
    print(f"{'PASS' if ok else 'FAIL'}: sweep-staleness at F = 1")
    failures += not ok

print(f"{failures} failed")
sys.exit(1 if failures else 0)
