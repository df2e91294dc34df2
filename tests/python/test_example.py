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
def test_train_gpt_example(capsys, tmp_path, opt):
    """... and --metrics: per step the lr scale and (strata's optimizers) the
    gradient's norm before clipping and the roots installed so far, as
    strata train's JSONL, so that the two can be compared step by step (a
    loss spike: its grad norm; the first root at the same step)."""
    import json
    met = tmp_path / "m.jsonl"
    plain = run(capsys, "--optimizer", opt, "--precondition-frequency", "2", "--metrics",
                str(met))
    hooked = run(capsys, "--optimizer", opt, "--precondition-frequency", "2", "--attach")
    assert plain == hooked
    rows = [json.loads(line) for line in met.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    # warm-up 20 (the AdamW tail's horizon, strata train's rule): a 3-step run ends before it
    assert [r["lr_scale"] for r in rows] == pytest.approx([0.05, 0.10, 0.15])
    assert all(math.isfinite(r["grad_norm"]) and r["grad_norm"] > 0 for r in rows), rows
    assert [f"{r['loss']:.4f}" for r in rows] == [p[0] for p in plain]
    roots = [r["root_refreshes"] for r in rows]
    if opt == "shampoo":  # roots every 2 steps from step 2: both factors of each matrix
        assert roots[0] == 0 and roots[1] > 0 and roots[1] % 2 == 0, roots


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


LIB = os.environ.get("STRATA_LIBRARY", "")
STRATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(LIB))), "cli",
                      "strata") if LIB else ""


@pytest.mark.skipif(not os.path.isdir(CORPUS), reason="no fortunes corpus")
@pytest.mark.skipif(not (STRATA and os.access(STRATA, os.X_OK)),
                    reason="no build/cli/strata next to $STRATA_LIBRARY")
@pytest.mark.parametrize("opt", ["shampoo", "soap", "kl-shampoo", "muon", "normuon", "dion2",
                                 "adamw"])
def test_example_runs_strata_trains_settings(tmp_path, opt):
    """The example's strata optimizers take `strata train`'s defaults
    (TRAINER_DEFAULTS, trainer_warmup): the lr, the AdamW tail's lr, weight
    decay, clipping, precondition frequency, the family fields strata
    train's JSONL config record names, and the warm-up at 20 and 300 steps,
    equal to that record's (issue #19: the same settings, the same loss)."""
    import json
    import subprocess
    sys.path.insert(0, EXAMPLE)
    try:
        import train_gpt
    finally:
        sys.path.remove(EXAMPLE)
    for steps in (20, 300):
        met = tmp_path / f"{opt}-{steps}.jsonl"
        subprocess.run([STRATA, "train", "--optimizer", opt, "--steps", str(steps), "--layers",
                        "1", "--d-model", "8", "--heads", "1", "--seq-len", "8", "--batch", "1",
                        "--eval-every", "0", "--eval-batches", "1", "--quiet", "--metrics",
                        str(met)], check=True, capture_output=True, timeout=120)
        rec = json.loads(met.read_text().splitlines()[0])
        args = train_gpt.parse(["--optimizer", opt, "--quiet", "--steps", str(steps)])
        model = train_gpt.GPT(256, 8, 8, 1, 1)
        o = train_gpt.make_optimizer(args, model)
        cfg = o._cfg
        fam = getattr(cfg, {"kl-shampoo": "kl_shampoo"}.get(opt, opt))
        f32 = lambda v: float(__import__("ctypes").c_float(v).value)  # noqa: E731
        # the record writes floats with 6 significant digits (report.c json_float): a
        # scaled lr (KL-Shampoo's own warm-up at 20 steps, 1e-2 x 20/50) has more
        g6 = lambda v: "%.6g" % float(v)  # noqa: E731
        assert g6(rec["lr"]) == g6(fam.lr), (opt, rec["lr"], fam.lr)
        assert f32(rec["weight_decay"]) == float(fam.weight_decay), opt
        assert f32(rec["adamw_lr"]) == float(cfg.adamw.lr), opt
        assert f32(rec["max_grad_norm"]) == float(cfg.max_grad_norm), opt
        for k, v in rec.items():  # the family's own fields the record names
            if k in ("lr", "weight_decay") or not hasattr(fam, k) or isinstance(v, (str, bool)) \
                    or v is None:
                continue
            if k == "precondition_frequency":
                continue  # the runtime-level value; the family's 0 means "the runtime's"
            if k == "start_preconditioning_step" and getattr(fam, k) < 0:
                continue  # -1 = F, which the record gives resolved
            assert f32(v) == float(getattr(fam, k)), (opt, k, v, getattr(fam, k))
        if "precondition_frequency" in rec and hasattr(fam, "precondition_frequency"):
            # strata_config.precondition_frequency > 0 overrides the families' own
            assert rec["precondition_frequency"] == (cfg.precondition_frequency or
                                                     fam.precondition_frequency), opt
        assert train_gpt.trainer_warmup(steps, o) == rec["warmup"], (opt, steps)
