#!/usr/bin/python3
# The table of decode_cpu.sh: decode tokens/s (best of the rounds) of tessera's generate in f32,
# bf16 (the f32 checkpoint under --weights bf16), int8 and int4 (and those under --weights bf16:
# bf16 products of the same stored bytes; and under --activations int8, rows intN-a8) and of transformers' generate, at
# batch 1 and 32; tessera / transformers and / tessera f32; and batch 1 against the limit the copy
# bandwidth sets: bandwidth / (bytes of weights and KV cache read per token). The bytes are the
# checkpoint's own: every /params dataset (quantised groups, scales and zero points as stored)
# except the token and position tables, of which one row each is read, and the head: a tied f32
# head reads the whole token table, a quantised head its stored groups; under bf16 every 2-D block
# matrix and the tied head at 2 bytes an element.
# usage: decode_cpu_report.py WORK_DIR PROMPT_LEN NEW_TOKENS
import glob
import json
import re
import sys

import h5py

work, prompt_len, new_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
PRECISIONS = ("f32", "bf16", "int8", "int4", "int8-bf16", "int4-bf16", "int8-a8", "int4-a8")


def fail(msg):
    sys.exit(f"error: decode_cpu_report.py: {msg}")


def bandwidth_gbs():
    text = open(f"{work}/runs/bandwidth.txt").read()
    m = re.search(r"copy of 64M floats ([0-9.]+) GB/s", text)
    if not m:
        fail(f"{work}/runs/bandwidth.txt has no copy bandwidth line")
    return float(m.group(1))


def model_bytes(path, bf16=False):
    """Bytes of the weights one decode step reads at batch 1, and the model's shape. bf16: the f32
    checkpoint as generate --weights bf16 holds it (2-D block matrices and the head in bf16)."""
    with h5py.File(path, "r") as f:
        sizes, matrices = {}, set()

        def visit(name, obj, g):
            if isinstance(obj, h5py.Dataset):
                sizes[f"{g}/{name}"] = obj.size * obj.dtype.itemsize
                if g == "params" and name.startswith("blocks.") and len(obj.shape) == 2:
                    matrices.add(f"{g}/{name}")

        for group in ("params", "qparams"):
            if group in f:
                f[group].visititems(lambda name, obj, g=group: visit(name, obj, g))
        attrs = {k: f.attrs[k] for k in f.attrs}
    if bf16:
        if "quantized" in attrs:
            fail(f"{path}: the bf16 row is the f32 checkpoint under --weights bf16, not a quantised one")
        for name in matrices:
            sizes[name] //= 2
    layers, hidden = int(attrs["model.layers"]), int(attrs["model.hidden"])
    tables = ["params/embed.tokens.weight", "params/embed.positions.weight"]
    missing = [t for t in tables if t not in sizes]
    if missing:
        fail(f"{path} lacks {missing}")
    read = sum(sizes.values()) - sum(sizes[t] for t in tables) + len(tables) * hidden * 4
    quantised_head = bool(attrs.get("quantized_head", 0))
    if not quantised_head and not any(n.startswith("params/head") for n in sizes):
        read += sizes[tables[0]] // (2 if bf16 else 1)  # the tied head reads the whole token table
    return read, layers, hidden, tables, quantised_head


def kv_bytes_per_token(layers, hidden):
    # Decode step k (k = 2..N) reads the cached keys and values of prompt_len + k - 1 positions.
    positions = [prompt_len + k - 1 for k in range(2, new_tokens + 1)]
    return 2 * layers * hidden * 4 * sum(positions) / len(positions)


def best(pattern, read):
    values = [read(p) for p in sorted(glob.glob(f"{work}/runs/{pattern}"))]
    if not values:
        fail(f"no runs {pattern} in {work}/runs")
    return max(values)


def tessera_rate(path):
    m = re.search(r"^generate: decode: .* ([0-9.eE+-]+) tokens/s$", open(path).read(), re.M)
    if not m:
        fail(f"{path} has no 'decode: ... tokens/s' line")
    return float(m.group(1))


bw = bandwidth_gbs()
ckpt = glob.glob(f"{work}/ck/step_*.h5")[0]
files = {"f32": ckpt, "bf16": ckpt, "int8": f"{work}/int8.h5", "int4": f"{work}/int4.h5",
         "int8-bf16": f"{work}/int8.h5", "int4-bf16": f"{work}/int4.h5",
         "int8-a8": f"{work}/int8.h5", "int4-a8": f"{work}/int4.h5"}


def bytes_of(p):
    return model_bytes(files[p], bf16=p == "bf16")


rates = {}
for batch in (1, 32):
    for p in PRECISIONS:
        rates[(p, batch)] = best(f"r*_b{batch}_{p}.log", tessera_rate)
    rates[("hf", batch)] = best(f"r*_b{batch}_hf.json", lambda f: json.load(open(f))["decode_tokens_per_s"])

# Greedy tokens of batch 1, f32: tessera's and transformers' (the same weights; a differing token
# is a near tie of random weights' logits or a bug: shown, not judged).
ours = json.loads(open(sorted(glob.glob(f"{work}/runs/r*_b1_f32.jsonl"))[0]).readline())["completion_ids"]
theirs = json.load(open(sorted(glob.glob(f"{work}/runs/r*_b1_hf.json"))[0]))["first_completion"]
same = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)

print(f"copy bandwidth (1 thread, 8 bytes per float copied): {bw:.1f} GB/s")
print()
print(f"{'program':<22} {'batch':>5} {'tok/s':>9} {'x hf':>6} {'x f32':>6} {'bytes/token MB':>15} {'limit tok/s':>11} {'% limit':>8}")
print("-" * 89)
for batch in (1, 32):
    for p in PRECISIONS + ("hf",):
        rate = rates[(p, batch)]
        name = f"tessera {p}" if p != "hf" else "transformers f32"
        line = f"{name:<22} {batch:>5} {rate:>9.1f} {rate / rates[('hf', batch)]:>6.2f} {rate / rates[('f32', batch)]:>6.2f}"
        if batch == 1:
            weights, layers, hidden, _, _ = bytes_of(p if p != "hf" else "f32")
            per_token = weights + kv_bytes_per_token(layers, hidden)
            limit = bw * 1e9 / per_token
            line += f" {per_token / 1e6:>15.1f} {limit:>11.1f} {100 * rate / limit:>7.0f}%"
        print(line)
print()
for p in PRECISIONS:
    w, layers, hidden, tables, qhead = bytes_of(p)
    head = "quantised" if qhead else f"tied {'bf16' if p == 'bf16' else 'f32'}: the token table"
    print(f"{p}: weights read per token {w / 1e6:.1f} MB (tables {', '.join(tables)} one row each; head "
          f"{head}), KV cache "
          f"{kv_bytes_per_token(layers, hidden) / 1e6:.2f} MB (mean over the decode steps)")
# New path against old, each pair run back to back in a round (the machine's load moves between
# rounds, less within a pair): the median of the rounds' ratios and their range.
rounds = sorted({int(re.search(r"/r(\d+)_b1_f32\.log$", p).group(1)) for p in glob.glob(f"{work}/runs/r*_b1_f32.log")})
print(f"new / old path, run back to back in each of {len(rounds)} round(s) (median, range):")
for new, old in (("bf16", "f32"), ("int8-bf16", "int8"), ("int4-bf16", "int4"), ("int8-a8", "int8"),
                 ("int4-a8", "int4")):
    parts = []
    for batch in (1, 32):
        ratios = sorted(tessera_rate(f"{work}/runs/r{r}_b{batch}_{new}.log") /
                        tessera_rate(f"{work}/runs/r{r}_b{batch}_{old}.log") for r in rounds)
        median = ratios[len(ratios) // 2] if len(ratios) % 2 else (ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2
        parts.append(f"batch {batch} {median:.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})")
    print(f"  {new:<10} / {old:<5} " + ", ".join(parts))
print("greedy tokens, batch 1 f32, tessera vs transformers: " +
      ("the same" if same is None and len(ours) == len(theirs) else f"differ from token {same}"))
print()
b1 = min(100 * rates[(p, 1)] / (bw * 1e9 / (bytes_of(p)[0] + kv_bytes_per_token(*bytes_of(p)[1:3])))
         for p in PRECISIONS)
b32 = min(rates[(p, 32)] / rates[("hf", 32)] for p in PRECISIONS)
print(f"targets (issue 34): batch 1 >= 70% of the limit in every precision: lowest {b1:.0f}% -> "
      f"{'met' if b1 >= 70 else 'not met'}; batch 32 >= 3x transformers: lowest {b32:.2f}x -> "
      f"{'met' if b32 >= 3 else 'not met'}")
