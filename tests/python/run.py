#!/usr/bin/env python3
"""Run the Python door's pytest tests (tests/python) against a built libstrata.

Usage: run.py LIBSTRATA_SO SOURCE_ROOT. The interpreter: $STRATA_PYTHON, else
SOURCE_ROOT/.venv/bin/python (scripts/setup-python.sh makes it), else this
one; it needs torch and pytest. Exit codes as meson reads them: pytest's 0
(pass) or 1 (fail); 77 (skip) when no interpreter has torch and pytest, unless
STRATA_REQUIRE_TORCH=1 (CI), which makes that a failure."""
import os
import subprocess
import sys


def has_torch(py: str) -> bool:
    try:
        return subprocess.run([py, "-c", "import torch, pytest"], capture_output=True,
                              timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def main() -> int:
    lib, root = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    candidates = [os.environ.get("STRATA_PYTHON"), os.path.join(root, ".venv", "bin", "python"),
                  sys.executable]
    junit = os.path.join(os.path.dirname(os.path.dirname(lib)), "meson-logs",
                         "pytest-python.xml")
    if os.path.exists(junit):
        os.remove(junit)  # a skipped run leaves no stale report behind
    py = next((c for c in candidates if c and os.path.exists(c) and has_torch(c)), None)
    if py is None:
        print("python tests: no interpreter with torch and pytest (scripts/setup-python.sh "
              "installs them into .venv)", file=sys.stderr)
        return 1 if os.environ.get("STRATA_REQUIRE_TORCH") == "1" else 77
    env = dict(os.environ, STRATA_LIBRARY=lib, PYTHONDONTWRITEBYTECODE="1")
    # the JUnit report scripts/test_summary.py counts case by case
    junit = os.path.join(os.path.dirname(os.path.dirname(lib)), "meson-logs",
                         "pytest-python.xml")
    if os.path.exists(junit):
        os.remove(junit)
    cmd = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", f"--junitxml={junit}",
           os.path.join(root, "tests", "python")]
    print("python tests:", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, env=env, cwd=root).returncode
    return 0 if rc == 0 else 1  # 5 (no tests collected) is a failure too


if __name__ == "__main__":
    sys.exit(main())
