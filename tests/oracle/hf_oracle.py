# The Hugging Face oracle (run by hf_interop.sh in the environment tests/tools/hf_venv.sh makes):
#   make   a small random gpt2 / llama / mistral / mixtral with transformers' save_pretrained
#   loss   transformers' loss on the batch of a gpt_train --dump against tessera's step-1 losses
#   export an export-hf folder against the original: safetensors reads it, the tensors are the
#          original bytes (same dtype), from_pretrained gives the same loss and greedy continuation
#   tokenizer  an export-hf folder's tokenizer files against the original's: the same bytes, and
#          AutoTokenizer encodes a text to the same ids from both
# Exit status: 0 when everything agrees, 1 on any mismatch (each one named).
import argparse
import json
import sys

import h5py
import numpy as np
import torch
import transformers
from safetensors import safe_open


def build(args):
    torch.manual_seed(args.seed)
    common = dict(vocab_size=args.vocab)
    if args.type == "gpt2":
        cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=args.positions or args.seq, resid_pdrop=0.0,
                                      embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, **common)
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        cls_cfg, cls = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
                        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
                        "mixtral": (transformers.MixtralConfig, transformers.MixtralForCausalLM)}[args.type]
        extra = dict(sliding_window=None) if args.type in ("mistral", "mixtral") else {}
        if args.type == "mixtral":
            extra.update(num_local_experts=4, num_experts_per_tok=2, router_jitter_noise=0.0)
        cfg = cls_cfg(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=5000.0,
                      tie_word_embeddings=args.tied, bos_token_id=0, eos_token_id=0, **extra, **common)
        model = cls(cfg)
    with torch.no_grad():  # larger than the default initialisation, so that the logits are far from uniform
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    if args.dtype == "bf16":
        model = model.to(torch.bfloat16)
    model.save_pretrained(args.out, safe_serialization=True, max_shard_size=args.shard or "10GB")
    if args.tokenizer_text:  # a byte-level BPE (GPT-2 style) of the model's vocabulary, saved beside it
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=args.vocab, special_tokens=["<|endoftext|>"], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train([args.tokenizer_text], trainer)
        fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                                    bos_token="<|endoftext|>")
        fast.save_pretrained(args.out)


def load(path):
    return transformers.AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32,
                                                             attn_implementation="eager").eval()


def batch_of(dump):
    with h5py.File(dump, "r") as f:
        rows = torch.from_numpy(np.asarray(f["/batches/step_1"], dtype=np.int64))
    return rows[:, :-1], rows[:, 1:]


def hf_loss(model, inputs, targets):
    with torch.no_grad():
        logits = model(input_ids=inputs).logits.float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).item()


def step1_loss(metrics):
    with open(metrics) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("step") == 1 and "loss" in rec:
                return rec["loss"]
    sys.exit(f"FAIL: {metrics} has no step-1 loss")


def check_loss(args):
    ref = hf_loss(load(args.model), *batch_of(args.dump))
    bad = 0
    for m in args.metrics:
        got = step1_loss(m)
        rel = abs(got - ref) / abs(ref)
        ok = rel <= args.tol
        bad += not ok
        print(f"{'ok' if ok else 'FAIL'}: {m}: tessera {got:.9g}, transformers {ref:.9g}, relative {rel:.2e} (tol {args.tol:g})")
    return 1 if bad else 0


def tensors_of(folder):
    import glob
    import os
    out = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        with safe_open(path, framework="pt") as f:
            for k in f.keys():
                out[k] = f.get_tensor(k)
    return out


def check_export(args):
    bad = 0
    orig, exp = tensors_of(args.orig), tensors_of(args.exported)
    if set(orig) != set(exp):
        print(f"FAIL: tensor names differ: only original {sorted(set(orig) - set(exp))}, only export {sorted(set(exp) - set(orig))}")
        bad += 1
    for k in sorted(set(orig) & set(exp)):
        a, b = orig[k], exp[k]
        same = a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.int16) if a.dtype != torch.float32 else a.view(torch.int32),
                                                                         b.view(torch.int16) if b.dtype != torch.float32 else b.view(torch.int32))
        if args.same_bytes and not same:
            print(f"FAIL: {k}: exported {b.dtype} {tuple(b.shape)} is not the original {a.dtype} {tuple(a.shape)} bit for bit")
            bad += 1
    if args.same_bytes and set(orig) == set(exp):
        print(f"{'ok' if bad == 0 else 'FAIL'}: safetensors reads the {len(exp)} exported tensors; each is the original bit for bit")
    inputs, targets = batch_of(args.dump)
    m_orig, m_exp = load(args.orig), load(args.exported)
    l_orig, l_exp = hf_loss(m_orig, inputs, targets), hf_loss(m_exp, inputs, targets)
    rel = abs(l_orig - l_exp) / abs(l_orig)
    print(f"{'ok' if rel <= args.tol else 'FAIL'}: loss original {l_orig:.9g}, export {l_exp:.9g}, relative {rel:.2e}")
    bad += rel > args.tol
    prompt = inputs[:1, :8]
    with torch.no_grad():
        g_orig = m_orig.generate(prompt, max_new_tokens=5, do_sample=False, pad_token_id=0)
        g_exp = m_exp.generate(prompt, max_new_tokens=5, do_sample=False, pad_token_id=0)
    same = torch.equal(g_orig, g_exp)
    print(f"{'ok' if same else 'FAIL'}: greedy continuation original {g_orig[0, 8:].tolist()}, export {g_exp[0, 8:].tolist()}")
    bad += not same
    with open(f"{args.exported}/config.json") as f:
        cfg = json.load(f)
    print(f"export config: model_type {cfg['model_type']}, torch_dtype {cfg['torch_dtype']}, {len(exp)} tensors")
    return 1 if bad else 0


def check_tokenizer(args):
    import os
    bad = 0
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        a, b = os.path.join(args.orig, name), os.path.join(args.exported, name)
        same = os.path.exists(b) and open(a, "rb").read() == open(b, "rb").read()
        print(f"{'ok' if same else 'FAIL'}: {name} of the export is the original's, byte for byte")
        bad += not same
    with open(args.text, encoding="utf-8") as f:
        text = f.read()
    a = transformers.AutoTokenizer.from_pretrained(args.orig)(text)["input_ids"]
    b = transformers.AutoTokenizer.from_pretrained(args.exported)(text)["input_ids"]
    print(f"{'ok' if a == b else 'FAIL'}: AutoTokenizer of the export encodes the text ({len(a)} ids) as the original's")
    bad += a != b
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--type", required=True, choices=["gpt2", "llama", "mistral", "mixtral"])
    m.add_argument("--out", required=True)
    m.add_argument("--vocab", type=int, required=True)
    m.add_argument("--seq", type=int, required=True)
    m.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    m.add_argument("--shard", default="")
    m.add_argument("--tied", action="store_true")
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--positions", type=int, default=0, help="gpt2: n_positions (default --seq)")
    m.add_argument("--tokenizer-text", default="", help="also train and save a byte-level BPE on this text")
    l = sub.add_parser("loss")
    l.add_argument("--model", required=True)
    l.add_argument("--dump", required=True)
    l.add_argument("--metrics", nargs="+", required=True)
    l.add_argument("--tol", type=float, default=1e-5)
    e = sub.add_parser("export")
    e.add_argument("--orig", required=True)
    e.add_argument("--exported", required=True)
    e.add_argument("--dump", required=True)
    e.add_argument("--same-bytes", action="store_true")
    e.add_argument("--tol", type=float, default=1e-6)
    t = sub.add_parser("tokenizer")
    t.add_argument("--orig", required=True)
    t.add_argument("--exported", required=True)
    t.add_argument("--text", required=True)
    args = p.parse_args()
    if args.cmd == "tokenizer":
        return check_tokenizer(args)
    if args.cmd == "make":
        build(args)
        return 0
    return check_loss(args) if args.cmd == "loss" else check_export(args)


if __name__ == "__main__":
    sys.exit(main())
