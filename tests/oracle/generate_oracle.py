#!/usr/bin/python3
# The decode oracle: reads a tessera checkpoint with h5py, rebuilds its model in float64 with the
# PyTorch forwards of torch_oracle.py (written from the models' definitions, not tessera's code;
# moe_train's mixture-of-experts blocks with every token at its top-k experts, no capacity),
# and replays `generate`'s greedy completions: at every step the token tessera chose must be
# PyTorch's argmax over a full recompute of the sequence (a near tie, top two within --tie-margin,
# is counted and accepted), and tessera's log-probability of it must agree within --logprob-tol.
#
# usage: generate_oracle.py --checkpoint C.h5 --prompts P.jsonl --completions OUT.jsonl
#                           [--norm-eps X] [--rope-theta X] [--new-tokens N]
# Exit status: 0 when every token agrees, 1 on any mismatch (each one named), 2 on bad input.
import argparse
import json
import os
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_oracle import DTYPE, gpt2_forward, llama_forward  # noqa: E402


def read_model(path, norm_eps, rope_theta):
    with h5py.File(path, "r") as f:
        attrs = f.attrs
        def text(k):
            v = attrs[k]
            return v.decode() if isinstance(v, bytes) else str(v)
        def num(k):
            return int(np.asarray(attrs[k]).ravel()[0])
        model = text("model")
        if model not in ("gpt", "llama", "moe_gpt", "moe_llama"):
            raise SystemExit(f"error: {path} holds a {model} model; the oracle decodes gpt, llama and their MoE")
        cfg = {"layers": num("model.layers"), "hidden": num("model.hidden"), "heads": num("model.heads"),
               "vocab_size": num("model.vocab")}
        if model.startswith("moe_"):  # moe_train's routing; its blocks are found by their router tensors
            cfg.update({"top_k": num("model.top_k"), "shared_experts": num("model.shared_experts"),
                        "gates_renormalised": num("model.gates_renormalised")})
            model = model[len("moe_"):]
        if model == "llama":
            cfg.update({"kv_heads": num("model.kv_heads"), "ffn_hidden": num("model.ffn_hidden"),
                        "tie_embeddings": num("model.tie_embeddings"), "norm_eps": norm_eps,
                        "rope_theta": rope_theta})
        params = {name: torch.tensor(np.asarray(ds[()], dtype=np.float64), dtype=DTYPE)
                  for name, ds in f["params"].items()}
    return model, cfg, params


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--completions", required=True)
    ap.add_argument("--norm-eps", type=float, default=1e-5)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--tie-margin", type=float, default=1e-4)
    ap.add_argument("--logprob-tol", type=float, default=1e-4)
    a = ap.parse_args()
    model, cfg, p = read_model(a.checkpoint, a.norm_eps, a.rope_theta)
    forward = gpt2_forward if model == "gpt" else llama_forward
    prompts, outs = read_jsonl(a.prompts), read_jsonl(a.completions)
    if len(prompts) != len(outs):
        raise SystemExit(f"error: {len(prompts)} prompts but {len(outs)} completions")
    failures, ties, checked = [], 0, 0
    for i, (prompt, out) in enumerate(zip(prompts, outs)):
        if out["index"] != i:
            failures.append(f"completion line {i + 1} has index {out['index']}")
            continue
        ids, got, logprobs = list(prompt["ids"]), out["completion_ids"], out["logprobs"]
        if len(got) != a.new_tokens or out["finish_reason"] != "length":
            failures.append(f"prompt {i}: {len(got)} tokens ({out['finish_reason']}), expected {a.new_tokens} (length)")
        with torch.no_grad():
            for k, token in enumerate(got):
                logits = forward(p, cfg, torch.tensor([ids], dtype=torch.long))[0, -1]
                best = int(torch.argmax(logits))
                if token != best:
                    gap = float(logits[best] - logits[token])
                    if gap > a.tie_margin:
                        failures.append(f"prompt {i}, token {k}: tessera chose {token}, PyTorch {best} "
                                        f"(logit gap {gap:.3g})")
                        break
                    ties += 1
                want = float(torch.log_softmax(logits, dim=-1)[token])
                if abs(logprobs[k] - want) > a.logprob_tol:
                    failures.append(f"prompt {i}, token {k}: logprob {logprobs[k]:.7g}, PyTorch {want:.7g}")
                ids.append(token)
                checked += 1
    for f in failures:
        print("MISMATCH:", f)
    print(f"generate_oracle: {model}, {checked} tokens of {len(prompts)} prompts checked, {ties} near ties, "
          f"{len(failures)} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
