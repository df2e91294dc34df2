#!/usr/bin/env python3
"""The README's C snippet against an installed prefix (issue #22 item 13).

`meson install --destdir` into a scratch folder, then, as a user would:
  - `pkg-config --static --libs strata` resolves every private requirement
    the library was built with (strata.pc lists them all);
  - the README's C snippet compiles and links with
    `cc snippet.c $(pkg-config --cflags --libs strata)`;
  - without a loader path it fails to start with "cannot open shared
    object file" (what the README tells a user to expect before ldconfig),
    and with LD_LIBRARY_PATH=<prefix>/<libdir> (the README's no-root way) or
    an rpath it runs and exits 0.
Usage: test_install.py BUILD_DIR README_SNIPPET_C SANITIZE
Exit 77 for a sanitizer build (an uninstrumented program cannot load an
instrumented library first) or without cc/pkg-config."""
import glob
import os
import shutil
import subprocess
import sys
import tempfile


def run(cmd, env=None, check=True):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=300)
    if check and p.returncode != 0:
        print("FAIL:", " ".join(cmd), "exited", p.returncode, "\n" + p.stdout)
        sys.exit(1)
    return p


def main():
    build, snippet, sanitize = sys.argv[1], sys.argv[2], sys.argv[3]
    if sanitize not in ("", "none"):
        print("skip: a", sanitize, "build's library needs the sanitizer runtime loaded first")
        return 77
    if not shutil.which("cc") or not shutil.which("pkg-config"):
        print("skip: no cc or pkg-config")
        return 77
    with tempfile.TemporaryDirectory(prefix="strata-install-") as dest:
        run(["meson", "install", "-C", build, "--no-rebuild", "--quiet", "--destdir", dest])
        pcs = glob.glob(os.path.join(dest, "**", "pkgconfig", "strata.pc"), recursive=True)
        if len(pcs) != 1:
            print("FAIL: installed strata.pc not found once under", dest, pcs)
            return 1
        libdir = os.path.dirname(os.path.dirname(pcs[0]))
        # the prefix the build was configured with, moved under the destdir: what a
        # user's own `meson setup --prefix DIR` install gives (pkg-config's
        # --define-prefix would guess it for every package, Debian's too)
        text = open(pcs[0]).read()
        prefix = next(l.split("=", 1)[1] for l in text.splitlines() if l.startswith("prefix="))
        pcdir = os.path.join(dest, "pc")
        os.mkdir(pcdir)
        with open(os.path.join(pcdir, "strata.pc"), "w") as f:
            f.write(text.replace("prefix=" + prefix, "prefix=" + dest + prefix, 1))
        env = dict(os.environ, PKG_CONFIG_PATH=pcdir)
        env.pop("LD_LIBRARY_PATH", None)
        pc = ["pkg-config"]
        static = run(pc + ["--static", "--libs", "strata"], env=env).stdout.split()
        print("strata.pc:\n" + text)
        # every library the installed libstrata needs appears in the static link line
        ldd = run(["ldd", os.path.join(libdir, "libstrata.so")], env=env).stdout
        needed = {"libopenblas": "-lopenblas", "liblapacke": "-llapacke",
                  "liburing": "-luring", "libhwloc": "-lhwloc", "libjson-c": "-ljson-c",
                  "libcrypto": "-lcrypto", "libmpi.so": "-lmpi", "libglpk": "-lglpk",
                  "libcudart": "-lcudart", "libcublas.so": "-lcublas", "libnccl": "-lnccl",
                  "libblis": "-lblis"}
        for lib, flag in needed.items():
            if lib in ldd and flag not in static:
                print("FAIL: libstrata.so links", lib, "but `pkg-config --static --libs "
                      "strata` lacks", flag, ":", " ".join(static))
                return 1
        flags = run(pc + ["--cflags", "--libs", "strata"], env=env).stdout.split()
        exe = os.path.join(dest, "snippet")
        run(["cc", "-std=c11", "-o", exe, snippet] + flags)
        bare = run([exe], env=env, check=False)
        if bare.returncode == 0 or "cannot open shared object file" not in bare.stdout:
            # a strata already installed system-wide would satisfy the loader: not this test's
            # prefix, so the README's warning cannot be checked here
            if "cannot open shared object file" not in bare.stdout and bare.returncode == 0:
                print("note: the snippet started without a loader path (libstrata.so.0 is "
                      "installed system-wide here)")
            else:
                print("FAIL: without a loader path the snippet exited", bare.returncode,
                      "and did not say 'cannot open shared object file':\n" + bare.stdout)
                return 1
        ok = run([exe], env=dict(env, LD_LIBRARY_PATH=libdir))
        print("with LD_LIBRARY_PATH:", ok.stdout.strip())
        exe_r = exe + "-rpath"
        run(["cc", "-std=c11", "-o", exe_r, snippet] + flags + ["-Wl,-rpath," + libdir])
        run([exe_r], env=env)
    print("installed prefix: pkg-config complete, snippet builds and runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
