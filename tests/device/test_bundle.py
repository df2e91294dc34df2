#!/usr/bin/env python3
"""The device bundle is self-contained (issue #20 item 1).

test_bundle.py BUNDLE: BUNDLE is scripts/device-bundle.sh's folder (or its
.tar.xz). Copies it to a temporary folder and, with LD_LIBRARY_PATH scrubbed
(the CUDA libraries' folder only), checks every bundled program:
  - ldd lists no "not found" except the CUDA libraries (cudart, cublas,
    cublasLt, nccl: found on the GPU machine at run time);
  - every library resolves from the copy, except the C/C++ runtime (glibc,
    libstdc++, libgcc_s, libm, libpthread, libdl, librt) and CUDA: nothing
    from Debian's library folders, nothing from the build tree;
  - it really starts (the loader binds its symbols, which ldd does not):
    exit 0 or 77 (no GPU), never 127 / "symbol lookup error";
and that the folder is under 64 MiB (the GPU machine's carry limit) and
holds a MANIFEST. Exit 0 pass, 1 fail, 77 skip (no nvcc, so no CUDA bundle
here; or no bundle given: STRATA_BUNDLE unset and none in the build folder).
"""
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

SYSTEM = re.compile(r"^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libstdc\+\+|"
                    r"libgcc_s|libresolv|libutil)\.so")
CUDA = re.compile(r"^lib(cuda|cudart|cublas|cublasLt|nccl|nvJitLink|nvrtc)\.so")
LIMIT = 64 << 20


def skip(msg):
    print(f"skipped: {msg}")
    sys.exit(77)


def main():
    if not (shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc")):
        skip("no nvcc: no CUDA build, so no device bundle here")
    src = sys.argv[1] if len(sys.argv) > 1 else ""
    src = os.environ.get("STRATA_BUNDLE") or src
    if not src or not os.path.exists(src):
        skip(f"no bundle at '{src}' (scripts/device-bundle.sh DIR makes one; "
             "STRATA_BUNDLE=DIR names it)")
    failures = []
    with tempfile.TemporaryDirectory(prefix="strata-bundle-") as tmp:
        if os.path.isdir(src):
            size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(src)
                       for f in fs)
            root = os.path.join(tmp, "bundle")
            shutil.copytree(src, root, symlinks=True)
        else:
            size = os.path.getsize(src)
            with tarfile.open(src) as t:
                t.extractall(tmp)
            root = os.path.dirname(next(os.path.join(d, "MANIFEST") for d, _, fs in
                                        os.walk(tmp) if "MANIFEST" in fs))
        print(f"bundle {src}: {size / 2**20:.1f} MiB (limit {LIMIT >> 20} MiB)")
        if size >= LIMIT:
            failures.append(f"bundle is {size / 2**20:.1f} MiB, not under {LIMIT >> 20} MiB")
        if not os.path.exists(os.path.join(root, "MANIFEST")):
            failures.append("no MANIFEST")
        # LD_BIND_NOW: the start below binds every symbol (a broken one, as
        # patchelf 0.14 made, fails at once instead of at its first call)
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "LD_BIND_NOW": "1"}
        cuda_dirs = [d for d in ("/usr/local/cuda/lib64", "/usr/local/cuda/lib")
                     if os.path.isdir(d)]
        if cuda_dirs:
            env["LD_LIBRARY_PATH"] = ":".join(cuda_dirs)
        progs = sorted(os.listdir(os.path.join(root, "bin")))
        if not progs:
            failures.append("no programs in bin/")
        for p in progs:
            path = os.path.join(root, "bin", p)
            out = subprocess.run(["ldd", path], env=env, capture_output=True, text=True).stdout
            n_bundle = 0
            for line in out.splitlines():
                m = re.match(r"\s*(\S+) => (.*?)(?: \(0x[0-9a-f]+\))?$", line)
                if not m:
                    continue
                name, where = m.group(1), m.group(2)
                if CUDA.match(name) or SYSTEM.match(name):
                    continue
                if where == "not found":
                    failures.append(f"{p}: {name} not found")
                elif os.path.realpath(where).startswith(os.path.realpath(root) + os.sep):
                    n_bundle += 1
                else:
                    failures.append(f"{p}: {name} resolved outside the bundle: {where}")
            # it starts: a CPU test runs, the others stop at "no GPU" (77) or print usage
            args = {"strata": ["--version"], "bench_cuda_device": ["ns"]}.get(p, [])
            r = subprocess.run([path] + args, env=env, capture_output=True, text=True,
                               timeout=120)
            text = r.stdout + r.stderr
            started = r.returncode in (0, 77) and "symbol lookup error" not in text and \
                "error while loading shared libraries" not in text
            print(f"{'ok  ' if started else 'FAIL'} {p}: {n_bundle} libraries from the bundle, "
                  f"exit {r.returncode}")
            if not started:
                failures.append(f"{p}: exit {r.returncode}: {text.strip()[-300:]}")
    for f in failures:
        print("FAIL:", f)
    print("bundle: pass" if not failures else f"bundle: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
