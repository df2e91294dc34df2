#!/usr/bin/env python3
"""Print 'N passed, N failed, N skipped' from a meson testlog.json.

The 'python' test (tests/python/run.py) runs many pytest cases: it leaves
their JUnit report beside the log (meson-logs/pytest-python.xml), and each
case counts here instead of the one meson entry (a run that failed without
a failing case still counts one failure)."""
import json
import os
import sys
import xml.etree.ElementTree as ET


def junit_counts(path):
    """(passed, failed, skipped) of a pytest JUnit XML report."""
    root = ET.parse(path).getroot()
    p = f = s = 0
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            f += 1
        elif case.find("skipped") is not None:
            s += 1
        else:
            p += 1
    return p, f, s


def tally(testlog):
    """(passed, failed, skipped) of a meson testlog.json, pytest cases expanded."""
    passed = failed = skipped = 0
    with open(testlog) as fh:
        for line in fh:
            entry = json.loads(line)
            r = entry["result"]
            junit = os.path.join(os.path.dirname(testlog), "pytest-python.xml")
            if entry["name"].endswith(" / python") and r != "SKIP" and os.path.exists(junit):
                p, f, s = junit_counts(junit)
                if r not in ("OK", "EXPECTEDFAIL") and f == 0:
                    f = 1
                passed, failed, skipped = passed + p, failed + f, skipped + s
            elif r in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif r == "SKIP":
                skipped += 1
            else:
                failed += 1
    return passed, failed, skipped


if __name__ == "__main__":
    passed, failed, skipped = tally(sys.argv[1])
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
