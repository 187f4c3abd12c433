#!/usr/bin/env bash
# examples.char-lm: the fourth training program on the loop library, a
# character-level Transformer language model, built as a user outside this
# repository builds it (install_and_build.sh) and trained with the installed
# ddp-launch on 2 ranks: a tiny model (1 layer, width 32, context 32) for 60
# steps with warm-up + cosine, clipping and accumulation of 2 batches. Checks
# that the loop ran those options (the start line; steps.jsonl, the
# program's per-step log: the learning rate rises linearly for 10 steps,
# then falls along the cosine to 0) and that the model learned from its
# input: the held-out perplexity is finite, falls from the first evaluation
# (step 20) to the last (step 60), and ends below the unigram perplexity of
# the same characters (what a model that ignores its input scores at best,
# about 22 of the 92-character alphabet; char-lm ends near 17.7). It does not
# catch a causal mask that leaks the future: 60 steps are too few for the
# tiny model to learn to read it. Skipped (77) without Debian's wordnet-base.
#   run_char_lm.sh BUILD_DIR EXAMPLE_SOURCE WORK_DIR [cmake args for the example...]
set -euo pipefail
wordnet=/usr/share/wordnet
[[ -r $wordnet/data.noun ]] || { echo "run_char_lm: $wordnet/data.noun not found (apt-get install wordnet-base); skipped"; exit 77; }
. "$(dirname "$0")/install_and_build.sh"
work=$3
install_and_build "$@"
ck=$work/ck
out=$(OMP_NUM_THREADS=1 "$work/prefix/bin/ddp-launch" --standalone --nproc_per_node=2 "$work/build/char-lm" \
        --wordnet_dir "$wordnet" --context 32 --d_model 32 --layers 1 --heads 2 --batch_size 8 \
        --accumulate_batches 2 --learning_rate 0.01 --total_steps 60 --warmup_steps 10 --grad_clip_norm 1 \
        --eval_every_steps 20 --test_sequences 64 --checkpoint_dir "$ck" 2>&1) ||
  { echo "$out"; echo "run_char_lm: char-lm failed under ddp-launch" >&2; exit 1; }
echo "$out"
fail() { echo "run_char_lm: $*" >&2; exit 1; }
grep -q '^char-lm: world size 2, batch 8 per process x 2 batches a step (32 global), ' <<<"$out" ||
  fail "no start line naming world size 2 and 2 batches a step"
grep -q '; lr schedule cosine over 60 steps (warm-up 10); at most 60 steps in all; gradients clipped to norm 1;' \
  <<<"$out" || fail "the start line does not show warm-up + cosine over 60 steps and clipping"
[[ $(grep -c '^step [0-9]* (epoch 1, step [0-9]*/[0-9]*): test_loss ' <<<"$out") == 2 ]] ||
  fail "not 2 mid-run evaluations (steps 20, 40)"
grep -q '^epoch 1: [0-9]* tokens/s$' <<<"$out" || fail "no tokens/s line from the program's callback"
[[ $(wc -l < "$ck/metrics.jsonl") == 1 ]] || fail "metrics.jsonl has not 1 line"
first=$(sed -n 's/^step 20 (.*perplexity \([0-9.]*\) .*/\1/p' <<<"$out")
[[ -n $first ]] || fail "no perplexity at step 20"
# The last perplexity (the epoch's, step 60), the unigram perplexity of the
# 64 evaluated windows' characters (frequencies of the training glosses, read
# as char-lm reads them), and the learning-rate curve of steps.jsonl.
verdict="$(python3 - "$ck" "$wordnet" "$first" <<'PY'
import collections, json, math, sys
def bad(message):
    print(message)
    sys.exit(1)
ck, wordnet, first = sys.argv[1], sys.argv[2], float(sys.argv[3])
r = json.loads(open(f"{ck}/metrics.jsonl").readline())
p = r["perplexity"]
if not (math.isfinite(p) and r["global_step"] == 60 and r["eval_samples"] == 64 and
        abs(math.log(p) - r["test_loss"]) < 1e-6 and abs(r["bits_per_char"] - r["test_loss"] / math.log(2)) < 1e-6):
    bad(f"metrics.jsonl: perplexity {p} not finite, not exp(test_loss), or not after 60 steps on 64 sequences")
train, test, n = [], [], 0
for name in ("data.noun", "data.verb", "data.adj", "data.adv"):
    for line in open(f"{wordnet}/{name}", "rb").read().split(b"\n"):
        gloss = line[line.find(b"|") + 1:].strip(b" \t\r")
        if line and not line.startswith(b"  ") and gloss:
            (test if n % 20 == 0 else train).append(gloss + b"\n")
            n += 1
train, test = b"".join(train), b"".join(test)
counts, windows = collections.Counter(train), (len(test) - 1) // 32
targets = b"".join(test[s + 1:s + 33] for s in ((i * windows // 64) * 32 for i in range(64)))
unigram = math.exp(-sum(math.log((counts[c] + 1) / (len(train) + 256)) for c in targets) / len(targets))
if not p < first:
    bad(f"perplexity did not fall: {first} at step 20 -> {p} at step 60")
if not p < unigram:
    bad(f"perplexity {p} after 60 steps is not below the characters' unigram perplexity {unigram:.2f}")
steps = [json.loads(l) for l in open(f"{ck}/steps.jsonl")]
if [s["global_step"] for s in steps] != list(range(1, 61)):
    bad("steps.jsonl does not hold global steps 1..60")
lr = [s["learning_rate"] for s in steps]
want = [0.01 * s / 10 if s < 10 else 0.01 * (1 + math.cos(math.pi * (s - 10) / 50)) / 2 for s in range(60)]
off = [i for i in range(60) if abs(lr[i] - want[i]) > 1e-6]
if off:
    bad(f"steps.jsonl: the learning rate of step {off[0] + 1} is {lr[off[0]]}, not {want[off[0]]:.6g} "
             f"(linear warm-up over 10 steps to 0.01, then cosine to 0 at step 60)")
if not all(s["grad_norm"] > 0 and math.isfinite(s["loss"]) for s in steps):
    bad("steps.jsonl: a step without a finite loss or a gradient norm (clipping reports it)")
print(f"ok {p:.3f} {unigram:.2f}")
PY
)" || fail "$verdict"
grep -q "^best perplexity: [0-9.]* in epoch: 1, saved in: $ck/epoch_1.pt\$" <<<"$out" || fail "no best perplexity line"
read -r _ last unigram <<<"$verdict"
echo "run_char_lm: ok (perplexity $first at step 20 -> $last at step 60, unigram $unigram)"
