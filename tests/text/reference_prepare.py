#!/usr/bin/env python3
"""The preparation step of ddp-text (docs/ddp-text.md, "Data preparation"),
written independently in plain Python from the spec, so a test can check that
the C++ step writes the same train.csv, test.csv, labels.txt and vocab.txt
byte for byte.  Usage: reference_prepare.py WORDNET_DIR OUT_DIR MIN_COUNT"""
import collections
import csv
import os
import re
import sys

LEXNAMES = """adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute
noun.body noun.cognition noun.communication noun.event noun.feeling noun.food noun.group
noun.location noun.motive noun.object noun.person noun.phenomenon noun.plant noun.possession
noun.process noun.quantity noun.relation noun.shape noun.state noun.substance noun.time verb.body
verb.change verb.cognition verb.communication verb.competition verb.consumption verb.contact
verb.creation verb.emotion verb.motion verb.perception verb.possession verb.social verb.stative
verb.weather adj.ppl""".split()


def fnv1a_64(data: bytes) -> int:
    h = 14695981039346656037
    for b in data:
        h = ((h ^ b) * 1099511628211) % 2**64
    return h


def main(wordnet_dir, out_dir, min_count):
    splits = {"train": [], "test": []}
    for letter, pos in zip("nvar", ["noun", "verb", "adj", "adv"]):
        with open(os.path.join(wordnet_dir, "data." + pos), "rb") as f:
            for raw in f:
                line = raw.decode("ascii")
                if line.startswith("  "):
                    continue
                fields = line.split(" ")
                gloss = line[line.index("|") + 1:].strip(" \t\r\n")
                key = f"{letter}:{fields[0]}".encode()
                split = "test" if fnv1a_64(key) % 10 == 0 else "train"
                splits[split].append((gloss, LEXNAMES[int(fields[1])]))
    os.makedirs(out_dir, exist_ok=True)
    for name, rows in splits.items():
        with open(os.path.join(out_dir, name + ".csv"), "w", newline="", encoding="ascii") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["text", "label"])
            w.writerows(rows)
    counts = collections.Counter()
    for text, _ in splits["train"]:
        counts.update(re.findall(r"[a-z0-9]+", text.lower()))
    kept = sorted((kv for kv in counts.items() if kv[1] >= min_count), key=lambda kv: (-kv[1], kv[0]))
    with open(os.path.join(out_dir, "vocab.txt"), "w", newline="\n") as f:
        f.write("".join(t + "\n" for t in ["<pad>", "<unk>"] + [t for t, _ in kept]))
    with open(os.path.join(out_dir, "labels.txt"), "w", newline="\n") as f:
        f.write("".join(n + "\n" for n in LEXNAMES))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
