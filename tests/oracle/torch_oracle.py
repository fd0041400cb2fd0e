#!/usr/bin/python3
# The PyTorch oracle: rebuilds tessera's GPT (the dump's `arch`: gpt2, or llama) in float64 from a
# `gpt_train --dump` file and checks step 1 (loss, logits, every gradient) and the loss of every
# AdamW step against tessera's output; when the dump also holds /final/<name> (the parameters after
# the last step) it checks those too. When it holds /segments/step_K (--document-mask) the
# attention is causal and block-diagonal by document and positions restart at each document. Both models are written here from their definitions, not
# from tessera's code.
#
# usage: torch_oracle.py --dump dump.h5 --metrics m.jsonl [--tol 1e-4]
# Exit status: 0 when everything agrees, 1 on any mismatch (each one named), 2 on bad input.
import argparse
import json
import math
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

DTYPE = torch.float64


def gpt2_param_shapes(cfg):
    """GPT-2's logical parameter names and shapes, [out, in] for weights, in tessera's naming."""
    V, C, T, L = cfg["vocab_size"], cfg["hidden"], cfg["seq_len"], cfg["layers"]
    shapes = {"embed.tokens.weight": (V, C), "embed.positions.weight": (T, C)}
    for i in range(L):
        b = f"blocks.{i}."
        shapes.update({
            b + "ln1.weight": (C,), b + "ln1.bias": (C,),
            b + "attn.qkv.weight": (3 * C, C), b + "attn.qkv.bias": (3 * C,),
            b + "attn.proj.weight": (C, C), b + "attn.proj.bias": (C,),
            b + "ln2.weight": (C,), b + "ln2.bias": (C,),
            b + "mlp.fc.weight": (4 * C, C), b + "mlp.fc.bias": (4 * C,),
            b + "mlp.proj.weight": (C, 4 * C), b + "mlp.proj.bias": (C,),
        })
    shapes.update({"ln_f.weight": (C,), "ln_f.bias": (C,)})
    return shapes


def gelu_mlp(p, prefix, h, e=None):
    """GPT-2's MLP (prefix fc, proj with biases); with e, expert e of stacked [E, out, in] weights."""
    w = (lambda n: p[prefix + n]) if e is None else (lambda n: p[prefix + n][e])
    return F.gelu(h @ w("fc.weight").t() + w("fc.bias"), approximate="tanh") @ w("proj.weight").t() + w("proj.bias")


def swiglu_mlp(p, prefix, h, e=None):
    """Llama's MLP down(silu(gate h) * up h); with e, expert e of stacked weights."""
    w = (lambda n: p[prefix + n]) if e is None else (lambda n: p[prefix + n][e])
    return (F.silu(h @ w("gate.weight").t()) * (h @ w("up.weight").t())) @ w("down.weight").t()


def moe_forward(p, cfg, prefix, h, mlp):
    """A mixture-of-experts feed-forward (moe_train's blocks) on h [B, T, C], every token sent to its
    top-k experts (no capacity): softmax of the router's logits, the k most probable experts,
    gates = their probabilities (renormalised to sum to 1 when cfg["gates_renormalised"]), output =
    the shared experts' MLP (if any) + sum of gate x expert(h)."""
    probs = (h @ p[prefix + "router.weight"].t()).softmax(dim=-1)
    gates, chosen = probs.topk(cfg["top_k"], dim=-1)
    if cfg["gates_renormalised"]:
        gates = gates / gates.sum(dim=-1, keepdim=True)
    out = mlp(p, prefix + "shared.", h) if cfg["shared_experts"] > 0 else torch.zeros_like(h)
    for e in range(probs.shape[-1]):
        weight = (gates * (chosen == e)).sum(dim=-1, keepdim=True)  # 0 where e is not chosen
        out = out + weight * mlp(p, prefix + "experts.", h, e)
    return out


def attention_mask(T, segments):
    """Which keys each query sees: causal [T, T], or with document segments [B, T] (--document-mask)
    causal and block-diagonal by document, [B, 1, T, T] (broadcast over the heads)."""
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    if segments is None:
        return causal
    same = segments[:, :, None] == segments[:, None, :]
    return (causal[None] & same)[:, None]


def positions_of(T, segments):
    """Each position's index: t, or with segments its distance from its document's first position."""
    t = torch.arange(T)
    if segments is None:
        return t
    starts = torch.zeros_like(segments)
    for i in range(1, T):  # the first position of the current document
        starts[:, i] = torch.where(segments[:, i] == segments[:, i - 1], starts[:, i - 1], torch.tensor(i))
    return t[None, :] - starts


def gpt2_forward(p, cfg, tokens, segments=None):
    """Logits [B, T, V] of the GPT-2 style model for int64 tokens [B, T] (segments: document masking)."""
    B, T = tokens.shape
    C, H, L = cfg["hidden"], cfg["heads"], cfg["layers"]
    D = C // H
    eps = 1e-5
    x = p["embed.tokens.weight"][tokens] + p["embed.positions.weight"][positions_of(T, segments)]
    causal = attention_mask(T, segments)
    for i in range(L):
        b = f"blocks.{i}."
        h = F.layer_norm(x, (C,), p[b + "ln1.weight"], p[b + "ln1.bias"], eps)
        qkv = h @ p[b + "attn.qkv.weight"].t() + p[b + "attn.qkv.bias"]
        q, k, v = qkv.split(C, dim=-1)
        # [B, T, C] -> [B, H, T, D]: head h owns columns h*D .. h*D+D-1 of q, k and v.
        q, k, v = (t.reshape(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p[b + "attn.proj.weight"].t() + p[b + "attn.proj.bias"]
        h = F.layer_norm(x, (C,), p[b + "ln2.weight"], p[b + "ln2.bias"], eps)
        if b + "moe.router.weight" in p:
            x = x + moe_forward(p, cfg, b + "moe.", h, gelu_mlp)
            continue
        x = x + gelu_mlp(p, b + "mlp.", h)
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], eps)
    return x @ p["embed.tokens.weight"].t()


def llama_param_shapes(cfg):
    """Llama's logical parameter names and shapes: no biases, no position table, k and v with
    kv_heads heads, an untied head unless tie_embeddings."""
    V, C, L = cfg["vocab_size"], cfg["hidden"], cfg["layers"]
    KD = cfg["kv_heads"] * (C // cfg["heads"])
    Fh = cfg["ffn_hidden"]
    shapes = {"embed.tokens.weight": (V, C)}
    for i in range(L):
        b = f"blocks.{i}."
        shapes.update({
            b + "ln1.weight": (C,),
            b + "attn.q.weight": (C, C), b + "attn.k.weight": (KD, C), b + "attn.v.weight": (KD, C),
            b + "attn.proj.weight": (C, C),
            b + "ln2.weight": (C,),
            b + "mlp.gate.weight": (Fh, C), b + "mlp.up.weight": (Fh, C), b + "mlp.down.weight": (C, Fh),
        })
    shapes["ln_f.weight"] = (C,)
    if not cfg["tie_embeddings"]:
        shapes["head.weight"] = (V, C)
    return shapes


def rms_norm(x, weight, eps):
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension."""
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps) * weight


def rotary(x, theta, positions=None):
    """Rotary positions on [B, heads, T, D], pairing element i with i + D/2 ("rotate half"):
    the pair turns by position * theta^(-2i/D); positions [B, T] (document masking) or 0..T-1."""
    T, D = x.shape[-2], x.shape[-1]
    half = D // 2
    inv_freq = theta ** (-2.0 * torch.arange(half, dtype=DTYPE) / D)
    if positions is not None and positions.dim() == 2:  # [B, T] -> angles [B, 1, T, D/2]
        angle = positions.to(DTYPE)[:, None, :, None] * inv_freq
    else:
        angle = torch.arange(T, dtype=DTYPE)[:, None] * inv_freq[None, :]  # [T, D/2]
    cos, sin = angle.cos(), angle.sin()
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def llama_forward(p, cfg, tokens, segments=None):
    """Logits [B, T, V] of the Llama model for int64 tokens [B, T] (segments: document masking)."""
    B, T = tokens.shape
    C, H, K, L = cfg["hidden"], cfg["heads"], cfg["kv_heads"], cfg["layers"]
    D = C // H
    eps, theta = cfg["norm_eps"], cfg["rope_theta"]
    x = p["embed.tokens.weight"][tokens]
    causal = attention_mask(T, segments)
    pos = positions_of(T, segments) if segments is not None else None
    for i in range(L):
        b = f"blocks.{i}."
        h = rms_norm(x, p[b + "ln1.weight"], eps)
        q = (h @ p[b + "attn.q.weight"].t()).reshape(B, T, H, D).transpose(1, 2)
        k = (h @ p[b + "attn.k.weight"].t()).reshape(B, T, K, D).transpose(1, 2)
        v = (h @ p[b + "attn.v.weight"].t()).reshape(B, T, K, D).transpose(1, 2)
        q, k = rotary(q, theta, pos), rotary(k, theta, pos)
        # grouped-query attention: query head j reads kv head j // (H / K)
        k = k.repeat_interleave(H // K, dim=1)
        v = v.repeat_interleave(H // K, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p[b + "attn.proj.weight"].t()
        h = rms_norm(x, p[b + "ln2.weight"], eps)
        if b + "moe.router.weight" in p:
            x = x + moe_forward(p, cfg, b + "moe.", h, swiglu_mlp)
            continue
        x = x + swiglu_mlp(p, b + "mlp.", h)
    x = rms_norm(x, p["ln_f.weight"], eps)
    head = p["embed.tokens.weight"] if cfg["tie_embeddings"] else p["head.weight"]
    return x @ head.t()


MODELS = {"gpt2": (gpt2_param_shapes, gpt2_forward), "llama": (llama_param_shapes, llama_forward)}


def read_config(attrs):
    """The model's configuration from the dump's root attributes; a dump without `arch` (written
    before Llama) is gpt2. Raises ValueError naming what is missing or inconsistent."""
    def attr(k, kind):
        if k not in attrs:
            raise ValueError(f"the dump's root has no attribute '{k}'")
        return kind(np.asarray(attrs[k]).ravel()[0])
    cfg = {k: attr(k, int) for k in
           ("layers", "hidden", "heads", "seq_len", "vocab_size", "global_batch", "steps")}
    arch = attrs.get("arch", "gpt2")
    if isinstance(arch, np.ndarray):
        arch = arch.ravel()[0]
    if isinstance(arch, bytes):
        arch = arch.decode()
    if arch not in MODELS:
        raise ValueError(f"the dump's arch is '{arch}'; the oracle knows {sorted(MODELS)}")
    cfg["arch"] = arch
    if arch == "llama":
        cfg.update({k: attr(k, int) for k in ("kv_heads", "ffn_hidden", "tie_embeddings")})
        cfg.update({k: attr(k, float) for k in ("norm_eps", "rope_theta")})
        C, H, K = cfg["hidden"], cfg["heads"], cfg["kv_heads"]
        if H < 1 or C % H or (C // H) % 2 or K < 1 or H % K or cfg["ffn_hidden"] < 1:
            raise ValueError(f"inconsistent llama shape: hidden {C}, heads {H}, kv_heads {K}, "
                             f"ffn_hidden {cfg['ffn_hidden']}")
    return cfg


def loss_of(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def rel_err(a, b):
    """||a - b|| / ||b|| (the reference b is float64); absolute when ||b|| is 0."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    diff = np.linalg.norm((a - b).ravel())
    ref = np.linalg.norm(b.ravel())
    if not np.all(np.isfinite(a)):
        return math.inf
    return diff / ref if ref > 0 else diff


def read_metrics(path):
    steps = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"error: {path}:{n}: not JSON ({e})")
            if "step" in obj and "loss" in obj:
                steps[int(obj["step"])] = obj
    return steps


class Report:
    def __init__(self, tol):
        self.tol = tol
        self.failures = []

    def check(self, what, err, detail=""):
        ok = err <= self.tol
        if not ok:
            self.failures.append(f"{what}: relative error {err:.3e} > {self.tol:.0e}{detail}")
        return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--final-tol", type=float, default=1e-3,
                    help="tolerance for the optional /final parameters: Adam's division by "
                         "sqrt(v) amplifies fp32 rounding over the steps (fp32 PyTorch: ~4e-5)")
    ap.add_argument("--show", type=int, default=8, help="how many worst gradients to print")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rep = Report(args.tol)

    with h5py.File(args.dump, "r") as f:
        a = f.attrs
        try:
            cfg = read_config(a)
        except ValueError as e:
            print(f"torch_oracle: {args.dump}: {e}")
            return 2
        opt = {k: float(np.asarray(a[k]).ravel()[0]) for k in
               ("beta1", "beta2", "eps", "weight_decay", "grad_clip")}
        param_shapes, forward = MODELS[cfg["arch"]]
        shapes = param_shapes(cfg)
        params, grads_ref = {}, {}
        bad = []
        for name, shape in shapes.items():
            if f"init/{name}" not in f:
                bad.append(f"/init/{name} missing")
                continue
            t = np.asarray(f[f"init/{name}"], dtype=np.float64)
            if t.shape != shape:
                bad.append(f"/init/{name} has shape {t.shape}, expected {shape}")
                continue
            params[name] = t
            g = f.get(f"step_1/grads/{name}")
            if g is None:
                bad.append(f"/step_1/grads/{name} missing")
            elif g.shape != shape:
                bad.append(f"/step_1/grads/{name} has shape {g.shape}, expected {shape}")
            else:
                grads_ref[name] = np.asarray(g, dtype=np.float64)
        extra = sorted(set(f["init"].keys()) - set(shapes)) if "init" in f else []
        if extra:
            bad.append(f"/init holds parameters the oracle does not know: {extra}")
        batches = {}
        for k in range(1, cfg["steps"] + 1):
            ds = f.get(f"batches/step_{k}")
            want = (cfg["global_batch"], cfg["seq_len"] + 1)
            if ds is None:
                bad.append(f"/batches/step_{k} missing")
            elif ds.shape != want:
                bad.append(f"/batches/step_{k} has shape {ds.shape}, expected {want}")
            else:
                batches[k] = torch.from_numpy(np.asarray(ds, dtype=np.int64))
        # optional: document masking's segments [G, T] of each step's rows (--document-mask)
        segments = {k: torch.from_numpy(np.asarray(f[f"segments/step_{k}"], dtype=np.int64))
                    for k in batches if f"segments/step_{k}" in f}
        # optional: the parameters after the last step, when the dump carries them
        final_t = {n: np.asarray(f[f"final/{n}"], dtype=np.float64) for n in shapes
                   if f"final/{n}" in f} if "final" in f else {}
        logits_t = np.asarray(f["step_1/logits"], dtype=np.float64) if "step_1/logits" in f else None
        loss_t = float(np.asarray(f["step_1/loss"]).ravel()[0]) if "step_1/loss" in f else None
    if logits_t is None or loss_t is None:
        bad.append("/step_1/logits or /step_1/loss missing")
    if bad:
        print("torch_oracle: the dump is not as expected:")
        for b in bad:
            print("  " + b)
        return 1

    metrics = read_metrics(args.metrics)
    llama = ""
    if cfg["arch"] == "llama":
        llama = (f" K={cfg['kv_heads']} F={cfg['ffn_hidden']} eps={cfg['norm_eps']:g} "
                 f"theta={cfg['rope_theta']:g} {'tied' if cfg['tie_embeddings'] else 'untied'} head")
    print(f"torch_oracle: {cfg['arch']} L={cfg['layers']} C={cfg['hidden']} H={cfg['heads']}{llama} "
          f"T={cfg['seq_len']} "
          f"V={cfg['vocab_size']} B={cfg['global_batch']} steps={cfg['steps']}; "
          f"AdamW betas=({opt['beta1']}, {opt['beta2']}) eps={opt['eps']} "
          f"wd={opt['weight_decay']} clip={opt['grad_clip']}; tolerance {args.tol:.0e} "
          f"(||tessera - torch64|| / ||torch64||)")
    for k, b in batches.items():
        if int(b.min()) < 0 or int(b.max()) >= cfg["vocab_size"]:
            print(f"FAIL: /batches/step_{k} holds tokens outside [0, {cfg['vocab_size']})")
            return 1

    p = {n: torch.tensor(v, dtype=DTYPE, requires_grad=True) for n, v in params.items()}

    # ---- step 1: loss, logits and every gradient ------------------------------------------
    tok = batches[1]
    logits = forward(p, cfg, tok[:, :-1], segments.get(1))
    if segments:
        print(f"  document mask: step 1 rows hold {int(segments[1][:, -1].sum()) + len(segments[1])} documents")
    loss = loss_of(logits, tok[:, 1:])
    loss.backward()

    print("\nstep 1")
    print(f"  {'quantity':<34} {'tessera':>14} {'torch fp64':>14} {'rel err':>10}")
    e = rel_err(loss_t, loss.item())
    ok = rep.check("step 1 loss (dump)", e)
    print(f"  {'loss':<34} {loss_t:>14.8f} {loss.item():>14.8f} {e:>10.2e} {'' if ok else 'FAIL'}")
    want = tuple(logits.shape)
    if logits_t.shape != want:
        rep.failures.append(f"step 1 logits: shape {logits_t.shape}, expected {want}")
        print(f"  logits: shape {logits_t.shape}, expected {want} FAIL")
    else:
        ref = logits.detach().numpy()
        e = rel_err(logits_t, ref)
        ok = rep.check("step 1 logits", e)
        mx = np.max(np.abs(logits_t - ref))
        print(f"  {'logits (max abs diff %.2e)' % mx:<34} {'':>14} {'':>14} {e:>10.2e} "
              f"{'' if ok else 'FAIL'}")

    rows = []
    for name in shapes:
        ref = p[name].grad.numpy()
        rows.append((rel_err(grads_ref[name], ref), name, np.linalg.norm(grads_ref[name]),
                     np.linalg.norm(ref)))
    for err, name, _, _ in rows:
        rep.check(f"step 1 grad {name}", err)
    rows.sort(reverse=True)
    nbad = sum(1 for r in rows if not r[0] <= args.tol)
    print(f"\n  gradients: {len(rows)} tensors, {nbad} over tolerance; worst {min(args.show, len(rows))}:")
    print(f"  {'parameter':<34} {'|g| tessera':>14} {'|g| torch64':>14} {'rel err':>10}")
    for err, name, nt, nr in rows[: max(args.show, nbad)]:
        print(f"  {name:<34} {nt:>14.6e} {nr:>14.6e} {err:>10.2e} {'' if err <= args.tol else 'FAIL'}")

    # ---- AdamW steps, loss per step against the metrics --------------------------------------
    names = list(shapes)
    # tessera decays the matrices (linear weights, embedding and head tables), not norms or biases
    decay = [p[n] for n in names if p[n].dim() == 2]
    no_decay = [p[n] for n in names if p[n].dim() != 2]
    optim = torch.optim.AdamW(
        [{"params": decay, "weight_decay": opt["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=0.0, betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"])
    print(f"\ntraining: {cfg['steps']} AdamW steps, lr from the metrics")
    print(f"  {'step':>4} {'lr':>11} {'loss tessera':>14} {'loss torch64':>14} {'rel err':>10} "
          f"{'gnorm tessera':>14} {'gnorm torch64':>14} {'rel err':>10}")
    for k in range(1, cfg["steps"] + 1):
        m = metrics.get(k)
        if m is None:
            rep.failures.append(f"step {k}: no metrics line with step {k} and loss")
            print(f"  {k:>4} (no metrics line) FAIL")
            break
        if k > 1:
            optim.zero_grad(set_to_none=True)
            tok = batches[k]
            loss = loss_of(forward(p, cfg, tok[:, :-1], segments.get(k)), tok[:, 1:])
            loss.backward()
        # the gradient norm over all parameters before clipping
        gnorm = torch.sqrt(sum((q.grad ** 2).sum() for q in p.values())).item()
        if opt["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(list(p.values()), opt["grad_clip"])
        lr = float(m["lr"])
        for g in optim.param_groups:
            g["lr"] = lr
        optim.step()
        e = rel_err(float(m["loss"]), loss.item())
        ok = rep.check(f"step {k} loss (metrics)", e,
                       f" (tessera {float(m['loss']):.8f}, torch {loss.item():.8f})")
        gcol = ""
        if "grad_norm" in m and m["grad_norm"] is not None:
            ge = rel_err(float(m["grad_norm"]), gnorm)
            # informative: the metrics' grad_norm is not part of the contract the oracle asserts
            gcol = f"{float(m['grad_norm']):>14.6e} {gnorm:>14.6e} {ge:>10.2e}"
            if not ge <= args.tol:
                gcol += " (warn)"
        print(f"  {k:>4} {lr:>11.4e} {float(m['loss']):>14.8f} {loss.item():>14.8f} {e:>10.2e} "
              f"{gcol} {'' if ok else 'FAIL'}")

    if final_t:
        def comparable(n, t):
            # The k part of qkv.bias has a gradient that is zero in exact arithmetic (softmax is
            # invariant to it), so Adam turns rounding noise into lr-sized steps: leave it out.
            if n.endswith("attn.qkv.bias"):
                C = cfg["hidden"]
                return np.concatenate([t[:C], t[2 * C:]])
            return t
        rows = sorted(((rel_err(comparable(n, final_t[n]), comparable(n, p[n].detach().numpy())), n)
                       for n in final_t), reverse=True)
        saved_tol, rep.tol = rep.tol, args.final_tol
        for err, n in rows:
            rep.check(f"final parameter {n}", err)
        rep.tol = saved_tol
        print(f"\n  final parameters (/final, tolerance {args.final_tol:.0e}): {len(rows)} tensors, "
              f"worst {rows[0][1]} rel err {rows[0][0]:.2e}")
        for err, n in rows:
            if not err <= args.final_tol:
                print(f"  {n:<34} {err:>10.2e} FAIL")

    print()
    if rep.failures:
        print(f"torch_oracle: FAIL, {len(rep.failures)} mismatch(es):")
        for msg in rep.failures:
            print("  " + msg)
        return 1
    print("torch_oracle: PASS (loss, logits, every gradient and every step's loss agree)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
