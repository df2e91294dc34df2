"""pytest setup for the Python door's tests: the package from the checkout's
python/ (unless STRATA_PYTHON_INSTALLED=1: the installed one), the library
from $STRATA_LIBRARY (the meson test passes the build's)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if os.environ.get("STRATA_PYTHON_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)
