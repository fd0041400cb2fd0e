#!/usr/bin/python3
# The PyTorch baseline of the CPU GPT benchmark: times training steps (forward, backward, AdamW
# step, zero_grad) of the same GPT-2 style model that gpt_train trains, in float32 (or, with
# --precision bf16, under torch.autocast's bfloat16 on fp32 parameters), on random tokens. `--sgemm N` instead times an N x N x N float32 matmul (torch.mm, PyTorch's own BLAS).
# Writes one JSON object (to --json, and to stdout).
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, 4 * C)
        self.fc_proj = nn.Linear(4 * C, C)

    def forward(self, x, causal):
        B, T, C = x.shape
        D = C // self.H
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.H, D).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        att = att.masked_fill(causal[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, C, H, L, T):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        self.register_buffer("causal", torch.ones(T, T, dtype=torch.bool).triu(1), persistent=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        x = self.wte(tokens) + self.wpe.weight[:T]
        for b in self.blocks:
            x = b(x, self.causal)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def bench_sgemm(n, reps):
    a = torch.randn(n, n)
    b = torch.randn(n, n)
    c = torch.mm(a, b)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(a, b, out=c)
        times.append(time.perf_counter() - t0)
    return {"what": f"torch.mm float32 {n}x{n}x{n}", "threads": torch.get_num_threads(),
            "best_s": min(times), "gflops": 2.0 * n ** 3 / min(times) / 1e9}


def bench_train(a):
    model = GPT(a.vocab, a.hidden, a.heads, a.layers, a.seq_len)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    gen = torch.Generator().manual_seed(1)
    step_ms, losses = [], []
    for step in range(1, a.steps + 1):
        batch = torch.randint(0, a.vocab, (a.batch, a.seq_len + 1), generator=gen)
        inputs, targets = batch[:, :-1], batch[:, 1:]
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(inputs, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step_ms.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss.item())
    timed = step_ms[a.warmup:]
    tokens = a.batch * a.seq_len
    return {"program": "pytorch", "torch": torch.__version__, "threads": torch.get_num_threads(), "precision": a.precision,
            "n_params": n_params, "tokens_per_step": tokens, "step_ms": step_ms,
            "warmup": a.warmup, "timed_steps": len(timed), "min_ms": min(timed),
            "median_ms": statistics.median(timed), "first_loss": losses[0], "last_loss": losses[-1]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--steps", type=int, default=13)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--sgemm", type=int, default=0, help="time an N^3 sgemm instead of training")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.sgemm:
        out = bench_sgemm(a.sgemm, 5)
    else:
        if a.steps - a.warmup < 1:
            raise SystemExit("error: --steps must exceed --warmup")
        out = bench_train(a)
    text = json.dumps(out)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
