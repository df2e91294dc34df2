"""The ctypes mirrors (strata/_lib.py) against the C headers: every field's
offset and every struct's size, from a small C program compiled here against
include/strata (skipped when no C compiler is found: the binding itself
compiles nothing)."""
import ctypes
import os
import shutil
import subprocess

import pytest

from strata import _lib as L

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def walk(struct, prefix=""):
    for name, ctype in struct._fields_:
        yield prefix + name, getattr(struct, name).offset
        if isinstance(ctype, type) and issubclass(ctype, ctypes.Structure):
            for sub, off in walk(ctype, prefix + name + "."):
                yield sub, getattr(struct, name).offset + off


def test_struct_layouts_match_headers(tmp_path):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "strata/strata.h"',
             "int main(void) {"]
    expect = []
    for cname, py in L.STRUCTS.items():
        lines.append(f'printf("{cname} %zu\\n", sizeof({cname}));')
        expect.append(f"{cname} {ctypes.sizeof(py)}")
        for field, off in walk(py):
            lines.append(f'printf("{cname}.{field} %zu\\n", offsetof({cname}, {field}));')
            expect.append(f"{cname}.{field} {off}")
    lines += ["return 0;", "}"]
    src = tmp_path / "abi.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "abi"
    subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"), str(src), "-o",
                    str(exe)], check=True)
    got = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    assert [g for g in got if g] == expect


def test_field_counts_match_headers():
    """The headers' STRATA_*_CONFIG_FIELDS counts (an array counts one per element)."""
    text = open(os.path.join(ROOT, "include", "strata", "optim.h")).read() + \
        open(os.path.join(ROOT, "include", "strata", "strata.h")).read()
    import re

    def count(py):
        n = 0
        for _, t in py._fields_:
            n += t._length_ if issubclass(t, ctypes.Array) else 1
        return n
    for macro, py in (("ADAMW", L.AdamWConfig), ("SHAMPOO", L.ShampooConfig),
                      ("MUON", L.MuonConfig), ("SOAP", L.SoapConfig),
                      ("KL_SHAMPOO", L.KLShampooConfig), ("NORMUON", L.NorMuonConfig),
                      ("DION2", L.Dion2Config)):
        m = re.search(rf"#define STRATA_{macro}_CONFIG_FIELDS (\d+)", text)
        assert m and int(m.group(1)) == count(py), macro
    m = re.search(r"#define STRATA_CONFIG_FIELDS (\d+)", text)
    assert int(m.group(1)) == len(L.Config._fields_)
