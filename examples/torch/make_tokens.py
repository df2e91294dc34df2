#!/usr/bin/env python3
"""Turn a text corpus into nanoGPT-style token files: OUT/train.bin and
OUT/val.bin (little-endian uint16 token ids, one after another) and
OUT/meta.json ({"vocab_size": V, "merges": [...]}), for
`train_gpt.py --data OUT`.

    python examples/torch/make_tokens.py /usr/share/games/fortunes runs/tok
    python examples/torch/make_tokens.py corpus.txt runs/tok --merges 512

Tokens: bytes (ids 0..255) and, with --merges N, N byte-pair merges learned
here from the corpus (Sennrich et al. 2016, "Neural Machine Translation of
Rare Words with Subword Units"; byte-level as GPT-2's): the text is cut into
words (a letter/digit run or a punctuation run with its leading space, or a
whitespace run), the most frequent adjacent pair over the words is merged
into a new id (ties: the smaller pair), N times. Nothing is downloaded. The
corpus is split into train and val chunks as train_gpt.py (and `strata
train`) split bytes, before tokenizing.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from train_gpt import read_corpus  # noqa: E402

WORD = re.compile(rb" ?[A-Za-z0-9\x80-\xff]+| ?[^A-Za-z0-9\x80-\xff\s]+|\s+")


def learn(words: Counter, n_merges: int) -> list[tuple[int, int]]:
    seqs = {w: list(w) for w in words}
    merges: list[tuple[int, int]] = []
    for k in range(n_merges):
        pairs: Counter = Counter()
        for w, s in seqs.items():
            c = words[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], -kv[0][0], -kv[0][1]))[0]
        new = 256 + k
        merges.append(best)
        for w, s in seqs.items():
            if len(s) > 1:
                seqs[w] = merge(s, best, new)
    return merges


def merge(s: list[int], pair: tuple[int, int], new: int) -> list[int]:
    out, i = [], 0
    while i < len(s):
        if i + 1 < len(s) and s[i] == pair[0] and s[i + 1] == pair[1]:
            out.append(new)
            i += 2
        else:
            out.append(s[i])
            i += 1
    return out


def encode(text: bytes, merges: list[tuple[int, int]]) -> list[int]:
    cache: dict[bytes, list[int]] = {}
    out: list[int] = []
    for m in WORD.finditer(text):
        w = m.group(0)
        ids = cache.get(w)
        if ids is None:
            ids = list(w)
            for k, pair in enumerate(merges):
                if len(ids) < 2:
                    break
                ids = merge(ids, pair, 256 + k)
            cache[w] = ids
        out += ids
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", help="a text file or a directory of them")
    ap.add_argument("out", help="output directory (created)")
    ap.add_argument("--merges", type=int, default=0, help="byte-pair merges (0: bytes only)")
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--max-bytes", type=int, default=0, help="use the first N bytes only")
    args = ap.parse_args(argv)
    if not 0 <= args.merges <= 65535 - 256:
        sys.exit("make_tokens: --merges must lie in 0..65279 (ids are uint16)")
    data = read_corpus(args.corpus)
    if args.max_bytes:
        data = data[:args.max_bytes]
    from train_gpt import split_bytes
    train, val = split_bytes(data, args.val_fraction, 2)
    merges = learn(Counter(m.group(0) for m in WORD.finditer(train)), args.merges) \
        if args.merges else []
    os.makedirs(args.out, exist_ok=True)
    import array
    for name, part in (("train", train), ("val", val)):
        ids = array.array("H", encode(part, merges))
        if sys.byteorder != "little":
            ids.byteswap()
        with open(os.path.join(args.out, name + ".bin"), "wb") as f:
            ids.tofile(f)
        print(f"make_tokens: {name}.bin {len(ids)} tokens from {len(part)} bytes")
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump({"vocab_size": 256 + len(merges), "merges": merges}, f)
    print(f"make_tokens: vocab_size {256 + len(merges)} in {args.out}/meta.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
