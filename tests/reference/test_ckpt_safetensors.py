#!/usr/bin/env python3
"""A checkpoint's weights open with Python's `safetensors` (usage:
test_ckpt_safetensors.py STRATA). Skips (77) without the safetensors or numpy
package. Oracle: the training summary's weights_hash (FNV-1a 64 over every
tensor's float32 bytes in registration order) recomputed from the arrays
safetensors.numpy loads from model.safetensors of a checkpoint taken after
the last step; the optimizer-state file opens too, its tensors with the
shapes and dtypes the rank table lists."""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from safetensors.numpy import load_file
except ImportError:
    print("skip: the safetensors and numpy packages are needed (pip install safetensors numpy)")
    sys.exit(77)

STRATA = sys.argv[1]


def fnv1a(data, h):
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    tmp = tempfile.mkdtemp(prefix="strata_st_")
    metrics = os.path.join(tmp, "m.jsonl")
    sd = os.path.join(tmp, "ck")
    p = subprocess.run([STRATA, "train", "--steps", "4", "--layers", "1", "--d-model", "32",
                        "--heads", "2", "--seq-len", "16", "--batch", "4", "--eval-every", "0",
                        "--optimizer", "soap", "--precondition-frequency", "2", "--no-progress",
                        "--save-every", "4", "--save-dir", sd, "--metrics", metrics],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        print("FAIL: training:", p.stderr[-500:])
        return 1
    summary = json.loads(open(metrics).read().splitlines()[-1])
    ck = os.path.join(sd, "step-00000004")
    manifest = json.load(open(os.path.join(ck, "manifest.json")))
    weights = load_file(os.path.join(ck, "model.safetensors"))
    h = 1469598103934665603
    for prm in manifest["params"]:
        a = weights[prm["name"]]
        if a.dtype != np.float32 or list(a.shape) != prm["shape"]:
            print(f"FAIL: {prm['name']}: {a.dtype} {a.shape}, manifest {prm['shape']}")
            return 1
        h = fnv1a(a.astype("<f4").tobytes(), h)
    if f"{h:016x}" != summary["weights_hash"]:
        print(f"FAIL: weights hash from safetensors {h:016x}, run {summary['weights_hash']}")
        return 1
    state = load_file(os.path.join(ck, "rank-00000.safetensors"))
    table = json.load(open(os.path.join(ck, "rank-00000.json")))
    names = {t["name"] for t in table["tensors"]}
    if set(state) != names:
        print("FAIL: state tensors", sorted(set(state) ^ names))
        return 1
    print(f"ok: {len(weights)} weights (hash {h:016x} = the run's), {len(state)} state tensors "
          f"open with safetensors")
    return old_soap_refused(sd, ck, state, table, manifest)


def old_soap_refused(sd, ck, state, table, manifest):
    """SOAP's first moment lives in the eigenbasis since issue #13, saved as
    '<param>/exp_avg_eigen'. A checkpoint from before, which held it in the
    original space as '<param>/exp_avg', must be refused with the reason
    (not loaded as if it were rotated). Made here by renaming the tensors in
    a copy (digest and size in the manifest updated, so only the name is
    old)."""
    import hashlib
    import shutil
    from safetensors.numpy import save_file
    eig = [k for k in state if k.endswith("/exp_avg_eigen")]
    if not eig:
        print("FAIL: no '/exp_avg_eigen' tensor in the SOAP state:", sorted(state)[:8])
        return 1
    old = os.path.join(sd, "old-soap")
    shutil.copytree(ck, old)
    ren = lambda k: k[:-len("_eigen")] if k.endswith("/exp_avg_eigen") else k
    fn = os.path.join(old, "rank-00000.safetensors")
    save_file({ren(k): v for k, v in state.items()}, fn)
    for t in table["tensors"]:
        t["name"] = ren(t["name"])
    json.dump(table, open(os.path.join(old, "rank-00000.json"), "w"))
    data = {f: open(os.path.join(old, f), "rb").read()
            for f in ("rank-00000.safetensors", "rank-00000.json")}

    def fix(o):
        if isinstance(o, dict):
            for key in ("name", "file", "path"):
                if o.get(key) in data:
                    b = data[o[key]]
                    for k in list(o):
                        if k == "sha256":
                            o[k] = hashlib.sha256(b).hexdigest()
                        elif k in ("bytes", "size"):
                            o[k] = len(b)
            for v in o.values():
                fix(v)
        elif isinstance(o, list):
            for v in o:
                fix(v)
    fix(manifest)
    json.dump(manifest, open(os.path.join(old, "manifest.json"), "w"))
    p = resume_soap(old, 2)
    want = ("exp_avg'", "eigenbasis", "exp_avg_eigen")
    if p.returncode == 0 or not all(w in p.stderr for w in want):
        print(f"FAIL: resuming a checkpoint with the old SOAP 'exp_avg' (rc {p.returncode}); "
              f"want an error naming {want}:", p.stderr[-600:])
        return 1
    line = next((ln for ln in p.stderr.splitlines() if "exp_avg_eigen" in ln), "")
    print("ok: the old SOAP first moment is refused:", line.strip()[:200])
    return other_form_refused(ck)


def resume_soap(ck, frequency):
    """A tiny SOAP run at precondition frequency `frequency` resumed from `ck`."""
    return subprocess.run([STRATA, "train", "--steps", "6", "--layers", "1", "--d-model", "32",
                           "--heads", "2", "--seq-len", "16", "--batch", "4", "--eval-every",
                           "0", "--optimizer", "soap", "--precondition-frequency",
                           str(frequency), "--no-progress", "--resume", ck],
                          capture_output=True, text=True, timeout=300)


def other_form_refused(ck):
    """At precondition_frequency 1 SOAP keeps M in the original space
    ('exp_avg_orig'); the F = 2 checkpoint's 'exp_avg_eigen' must be refused
    there with the reason, not loaded as if it were unrotated."""
    p = resume_soap(ck, 1)
    want = ("exp_avg_eigen", "original space", "--precondition-frequency")
    if p.returncode == 0 or not all(w in p.stderr for w in want):
        print(f"FAIL: resuming an F = 2 SOAP checkpoint at F = 1 (rc {p.returncode}); want an "
              f"error naming {want}:", p.stderr[-600:])
        return 1
    print("ok: an eigenbasis-form first moment is refused at F = 1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
