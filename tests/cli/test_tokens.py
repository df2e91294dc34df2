#!/usr/bin/env python3
"""`strata train` on nanoGPT-style token files (issue #19 item 8; usage:
test_tokens.py STRATA).

1. Token files holding a byte corpus's own split (train.bin = the train
   bytes, val.bin = the val bytes, as uint16) train bit for bit as the byte
   corpus does: the same loss at every step and the same val loss (the token
   path and the byte path share the windows and the arithmetic).
2. Token files with a vocabulary of 300 (meta.json): the model gets 300
   embedding rows (header, config record), the loss starts near ln 300,
   stays finite and falls.
3. Bad token files and bad vocabulary sizes are refused with exit 1 and a
   message naming the file (and the offset of an id out of range); the
   --metrics file is not created.
4. A checkpoint records the vocabulary and the data format: a resume with
   another --vocab-size, or on bytes, is refused naming both values.
Exit 0 pass, 1 fail.
"""
import array
import json
import math
import os
import subprocess
import sys
import tempfile

STRATA = sys.argv[1]
TINY = ["--layers", "1", "--d-model", "32", "--heads", "2", "--seq-len", "16", "--batch", "4",
        "--no-progress", "--optimizer", "adamw", "--eval-batches", "2", "--threads", "1"]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)


def run(*args):
    return subprocess.run([STRATA, "train", *TINY, *args], capture_output=True, text=True,
                          timeout=120)


def records(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def write_ids(path, ids):
    a = array.array("H", list(ids))
    if sys.byteorder != "little":
        a.byteswap()
    with open(path, "wb") as f:
        a.tofile(f)


def split_bytes(data, f, min_len):
    """data.h's split: chunks of 4096 bytes halved (not below max(256, min_len))
    while the corpus gives fewer than 8 val chunks; chunk i is val when
    floor((i + 1) f) > floor(i f)."""
    chunk, smallest = 4096, max(256, min_len)
    while chunk // 2 >= smallest and (len(data) // chunk) * f < 8:
        chunk //= 2
    train, val = bytearray(), bytearray()
    for i in range(0, (len(data) + chunk - 1) // chunk):
        piece = data[i * chunk:(i + 1) * chunk]
        (val if math.floor((i + 1) * f) > math.floor(i * f) else train).extend(piece)
    return bytes(train), bytes(val)


tmp = tempfile.mkdtemp(prefix="strata-tokens-")
# a deterministic text corpus (~24 KB): words drawn by an LCG
words = [b"the", b"cat", b"sat", b"on", b"a", b"mat", b"and", b"dog", b"ran", b"far", b"away"]
s, text = 12345, bytearray()
while len(text) < 24000:
    s = (s * 1103515245 + 12345) % 2**31
    text += words[(s >> 16) % len(words)] + (b".\n" if (s >> 8) % 9 == 0 else b" ")
corpus = os.path.join(tmp, "corpus.txt")
with open(corpus, "wb") as f:
    f.write(text)

# 1. the same bytes as token files: bit-identical
train, val = split_bytes(bytes(text), 0.1, 17)
same = os.path.join(tmp, "same")
os.makedirs(same)
write_ids(os.path.join(same, "train.bin"), train)
write_ids(os.path.join(same, "val.bin"), val)
with open(os.path.join(same, "meta.json"), "w") as f:
    json.dump({"vocab_size": 256}, f)
mb, mt = os.path.join(tmp, "bytes.jsonl"), os.path.join(tmp, "tok.jsonl")
rb = run("--data", corpus, "--steps", "12", "--eval-every", "6", "--metrics", mb)
rt = run("--data", same, "--steps", "12", "--eval-every", "6", "--metrics", mt)
check(rb.returncode == 0 and rt.returncode == 0, f"byte and token runs: rc {rb.returncode} "
      f"{rt.returncode} {rb.stderr[-300:]} {rt.stderr[-300:]}")
if rb.returncode == 0 and rt.returncode == 0:
    sb = [r for r in records(mb) if r["type"] in ("step", "summary")]
    st = [r for r in records(mt) if r["type"] in ("step", "summary")]
    lb = [(r.get("loss"), r.get("val_loss"), r.get("final_val_loss")) for r in sb]
    lt = [(r.get("loss"), r.get("val_loss"), r.get("final_val_loss")) for r in st]
    check(len(lb) == 13 and lb == lt, f"token files of the byte split train bit for bit as the "
          f"bytes: {lb[-1]} vs {lt[-1]}")
    cfg = [r for r in records(mt) if r["type"] == "config"][0]
    cfgb = [r for r in records(mb) if r["type"] == "config"][0]
    check(cfg.get("data_format") == "tokens" and cfg.get("vocab") == 256 and
          cfgb.get("data_format") == "bytes" and cfgb.get("vocab") == 256,
          "config records: data_format tokens/bytes, vocab 256")

# 2. a vocabulary of 300: id = (3 * previous + a coin) % 300, learnable
V = 300
tok = os.path.join(tmp, "v300")
os.makedirs(tok)
s, ids = 777, [0]
while len(ids) < 12000:
    s = (s * 1103515245 + 12345) % 2**31
    ids.append((3 * ids[-1] + (s >> 16) % 2) % V)
write_ids(os.path.join(tok, "train.bin"), ids[:10000])
write_ids(os.path.join(tok, "val.bin"), ids[10000:])
with open(os.path.join(tok, "meta.json"), "w") as f:
    json.dump({"vocab_size": V, "merges": []}, f)
m300 = os.path.join(tmp, "v300.jsonl")
r = run("--data", tok, "--steps", "30", "--eval-every", "0", "--metrics", m300,
        "--adamw-lr", "0.02")
check(r.returncode == 0 and f"tokens, vocab {V}" in r.stdout,
      f"vocab {V} from meta.json: rc {r.returncode} {r.stdout[:300]} {r.stderr[-300:]}")
if r.returncode == 0:
    steps = [x["loss"] for x in records(m300) if x["type"] == "step"]
    cfg = [x for x in records(m300) if x["type"] == "config"][0]
    check(cfg.get("vocab") == V, f"config record: vocab {cfg.get('vocab')}")
    check(len(steps) == 30 and all(math.isfinite(v) for v in steps) and
          abs(steps[0] - math.log(V)) < 0.05 * math.log(V) and
          sum(steps[-5:]) / 5 < steps[0] - 0.5,
          f"loss starts near ln {V} = {math.log(V):.3f} and falls: {steps[0]:.4f} -> "
          f"{sum(steps[-5:]) / 5:.4f}")

# 3. refusals: exit 1, the file named, no metrics file
def refused(name, setup, want, *extra, rc=1):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    write_ids(os.path.join(d, "train.bin"), ids[:2000])
    write_ids(os.path.join(d, "val.bin"), ids[2000:2500])
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump({"vocab_size": V}, f)
    setup(d)
    m = os.path.join(tmp, name + ".jsonl")
    r = run("--data", d, "--steps", "2", "--metrics", m, *extra)
    check(r.returncode == rc and all(w in r.stderr for w in want) and not os.path.exists(m),
          f"{name}: refused (rc {r.returncode}): {r.stderr.strip()[-260:]}")


def big_id(d):
    bad = ids[2000:2500]
    bad[7] = V  # token 7 of val.bin: byte offset 14
    write_ids(os.path.join(d, "val.bin"), bad)


def odd(d):
    with open(os.path.join(d, "train.bin"), "ab") as f:
        f.write(b"\x01")


def empty(d):
    open(os.path.join(d, "val.bin"), "wb").close()


def no_meta(d):
    os.remove(os.path.join(d, "meta.json"))


def big_meta(d):
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump({"vocab_size": 70000}, f)


def no_val(d):
    os.remove(os.path.join(d, "val.bin"))


refused("id_out_of_range", big_id, ["val.bin", "id 300", "byte offset 14", "token 7", "300"])
refused("smaller_vocab", lambda d: None, ["train.bin", ">= the vocabulary size 200"],
        "--vocab-size", "200")
refused("odd_length", odd, ["train.bin", "odd"])
refused("empty", empty, ["val.bin", "empty"])
refused("no_meta", no_meta, ["meta.json", "--vocab-size"])
refused("meta_too_large", big_meta, ["meta.json", "70000", "65536"])
refused("no_val", no_val, ["val.bin"])
refused("vocab_flag_too_large", lambda d: None, ["--vocab-size"], "--vocab-size", "65537", rc=2)
refused("vocab_flag_too_small", lambda d: None, ["--vocab-size"], "--vocab-size", "1", rc=2)
# a file (or a missing path) read as token files: the path is said first, before any
# question about the vocabulary (issue #22: --data FILE --data-format tokens asked for
# --vocab-size)
f = os.path.join(tmp, "train.bin")
write_ids(f, ids[:2000])
# a folder without token files (and no meta.json): train.bin named, not --vocab-size
plain = os.path.join(tmp, "plain")
os.makedirs(plain)
with open(os.path.join(plain, "text"), "w") as fh:
    fh.write("no token files here\n")
for path, want in ((f, "is not a directory"), (os.path.join(tmp, "absent"), "cannot access"),
                   (plain, "train.bin")):
    r = run("--data", path, "--data-format", "tokens", "--steps", "2")
    check(r.returncode == 1 and want in r.stderr and path in r.stderr and
          "--vocab-size" not in r.stderr,
          f"--data {os.path.basename(path)} --data-format tokens: the path refused first: "
          f"{r.stderr.strip()[-200:]}")
r = run("--data", corpus, "--vocab-size", "300", "--steps", "2")
check(r.returncode == 1 and "--vocab-size 300" in r.stderr and "bytes" in r.stderr,
      f"--vocab-size on a byte corpus refused: {r.stderr.strip()[-200:]}")

# 4. checkpoints: the vocabulary and the format are the model's shape
ck = os.path.join(tmp, "ck")
r = run("--data", tok, "--steps", "4", "--save-every", "2", "--save-dir", ck)
check(r.returncode == 0, f"a token run saves: {r.stderr[-200:]}")
r = run("--data", tok, "--steps", "4", "--resume", ck, "--vocab-size", "400")
check(r.returncode == 1 and "vocab (--vocab-size)" in r.stderr and "300 in the checkpoint" in
      r.stderr and "400 in this run" in r.stderr,
      f"resume with another vocabulary refused: {r.stderr.strip()[-240:]}")
r = run("--data", tok, "--steps", "6", "--resume", ck)
check(r.returncode == 0, f"resume with the same vocabulary: {r.stderr[-200:]}")
ck2 = os.path.join(tmp, "ck2")
r = run("--data", same, "--steps", "2", "--save-every", "2", "--save-dir", ck2)
r2 = run("--data", corpus, "--steps", "2", "--resume", ck2)
check(r.returncode == 0 and r2.returncode == 1 and "trained on tokens" in r2.stderr and
      "reads bytes" in r2.stderr,
      f"a token checkpoint resumed on bytes (both vocab 256) refused: {r2.stderr.strip()[-240:]}")

subprocess.run(["rm", "-rf", tmp])
print("FAILED: %d" % len(failures) if failures else "all ok")
sys.exit(1 if failures else 0)
