"""examples/torch/train_gpt.py runs a few steps on the fortunes corpus (a
tiny model): finite losses, a val loss, and the same numbers with and without
--attach (strata's module hooks change nothing in one process)."""
import math
import os
import re
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "torch")
CORPUS = "/usr/share/games/fortunes"
TINY = ["--steps", "3", "--layers", "1", "--d-model", "32", "--heads", "2", "--seq-len",
        "32", "--batch", "4", "--eval-every", "0", "--eval-batches", "1", "--quiet"]


def run(capsys, *extra):
    sys.path.insert(0, EXAMPLE)
    try:
        import train_gpt
    finally:
        sys.path.remove(EXAMPLE)
    assert train_gpt.main(TINY + list(extra)) == 0
    out = capsys.readouterr().out
    steps = re.findall(r"^step +(\d+) +loss ([0-9.naninf]+)(?: +val ([0-9.naninf]+))?", out, re.M)
    assert [int(s[0]) for s in steps] == [1, 2, 3], out
    losses = [float(s[1]) for s in steps]
    assert all(math.isfinite(v) and 0 < v < 10 for v in losses), out
    assert steps[-1][2] and math.isfinite(float(steps[-1][2])), out
    return [s[1:] for s in steps]


@pytest.mark.skipif(not os.path.isdir(CORPUS), reason="no fortunes corpus")
@pytest.mark.parametrize("opt", ["shampoo", "muon"])
def test_train_gpt_example(capsys, opt):
    plain = run(capsys, "--optimizer", opt, "--precondition-frequency", "2")
    hooked = run(capsys, "--optimizer", opt, "--precondition-frequency", "2", "--attach")
    assert plain == hooked


def test_train_gpt_flags():
    """strata train's model flags (--layers, --heads; --n-layer and --n-head
    stay as aliases) and every strata optimizer, dion2 included."""
    sys.path.insert(0, EXAMPLE)
    try:
        import train_gpt
    finally:
        sys.path.remove(EXAMPLE)
    new = train_gpt.parse(["--layers", "3", "--heads", "2"])
    old = train_gpt.parse(["--n-layer", "3", "--n-head", "2"])
    assert (new.n_layer, new.n_head) == (old.n_layer, old.n_head) == (3, 2)
    for opt in ("shampoo", "soap", "kl-shampoo", "muon", "normuon", "dion2", "adamw"):
        assert train_gpt.parse(["--optimizer", opt]).optimizer == opt
    args = train_gpt.parse(["--optimizer", "dion2", "--quiet"])
    model = train_gpt.GPT(256, 8, 16, 1, 2)
    assert type(train_gpt.make_optimizer(args, model)).__name__ == "Dion2"


@pytest.mark.skipif(not os.path.isdir(CORPUS), reason="no fortunes corpus")
def test_token_files(capsys, tmp_path):
    """make_tokens.py writes uint16 train.bin/val.bin and meta.json (a few
    byte-pair merges learned from 64 KB); the tokens decode back to the split
    bytes; train_gpt.py trains on them with that vocabulary."""
    sys.path.insert(0, EXAMPLE)
    try:
        import make_tokens
        import train_gpt
    finally:
        sys.path.remove(EXAMPLE)
    out = tmp_path / "tok"
    assert make_tokens.main([CORPUS, str(out), "--merges", "24", "--max-bytes", "65536"]) == 0
    meta = __import__("json").loads((out / "meta.json").read_text())
    assert meta["vocab_size"] == 256 + 24 and len(meta["merges"]) == 24
    ids = __import__("array").array("H")
    ids.frombytes((out / "train.bin").read_bytes())
    table = {i: bytes([i]) for i in range(256)}
    for k, (a, b) in enumerate(meta["merges"]):
        table[256 + k] = table[a] + table[b]
    train, _ = train_gpt.split_bytes(train_gpt.read_corpus(CORPUS)[:65536], 0.1, 2)
    assert b"".join(table[i] for i in ids) == train
    assert len(ids) < len(train)  # the merges compress
    capsys.readouterr()
    assert train_gpt.main(TINY + ["--data", str(out)]) == 0
    text = capsys.readouterr().out
    assert "vocab 280" in text and re.search(r"^step +3 +loss [0-9.]+ +val", text, re.M), text
