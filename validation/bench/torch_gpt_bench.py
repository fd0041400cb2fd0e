#!/usr/bin/python3
# The PyTorch baseline of the CPU GPT benchmark: times training steps (forward, backward, AdamW
# step, zero_grad) of the same model that gpt_train trains (GPT-2 style, or with --arch llama the
# Llama style: RMSNorm, rotary grouped-query attention, SwiGLU, untied head), in float32 (or, with
# --precision bf16, under torch.autocast's bfloat16 on fp32 parameters), on random tokens; with
# --compile, the model under torch.compile (PyTorch 2). `--sgemm N` instead times an N x N x N
# float32 matmul (torch.mm, PyTorch's own BLAS).
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


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotate(x, cos, sin):
    """Hugging Face Llama's rotate-half pairing: x [B, H, T, D]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class LlamaBlock(nn.Module):
    def __init__(self, C, H, K, F_, eps):
        super().__init__()
        self.H, self.K, self.eps = H, K, eps
        D = C // H
        self.ln1 = nn.Parameter(torch.ones(C))
        self.q = nn.Linear(C, C, bias=False)
        self.k = nn.Linear(C, K * D, bias=False)
        self.v = nn.Linear(C, K * D, bias=False)
        self.proj = nn.Linear(C, C, bias=False)
        self.ln2 = nn.Parameter(torch.ones(C))
        self.gate = nn.Linear(C, F_, bias=False)
        self.up = nn.Linear(C, F_, bias=False)
        self.down = nn.Linear(F_, C, bias=False)

    def forward(self, x, causal, cos, sin):
        B, T, C = x.shape
        D = C // self.H
        h = rms_norm(x, self.ln1, self.eps)
        q = self.q(h).view(B, T, self.H, D).transpose(1, 2)
        k = self.k(h).view(B, T, self.K, D).transpose(1, 2)
        v = self.v(h).view(B, T, self.K, D).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        k = k.repeat_interleave(self.H // self.K, dim=1)
        v = v.repeat_interleave(self.H // self.K, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        att = att.masked_fill(causal[:T, :T], float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        h = rms_norm(x, self.ln2, self.eps)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, V, C, H, K, F_, L, T, theta=10000.0, eps=1e-5):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.blocks = nn.ModuleList(LlamaBlock(C, H, K, F_, eps) for _ in range(L))
        self.ln_f = nn.Parameter(torch.ones(C))
        self.head = nn.Linear(C, V, bias=False)
        self.eps = eps
        D = C // H
        inv_freq = theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
        angles = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)
        self.register_buffer("causal", torch.ones(T, T, dtype=torch.bool).triu(1), persistent=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, tokens, targets):
        T = tokens.shape[1]
        x = self.wte(tokens)
        cos, sin = self.cos[:T], self.sin[:T]
        for b in self.blocks:
            x = b(x, self.causal, cos, sin)
        logits = self.head(rms_norm(x, self.ln_f, self.eps))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def llama_ffn_hidden(C):
    """Llama's default SwiGLU size: 8/3 of the hidden size rounded up to a multiple of 256."""
    return (8 * C // 3 + 255) // 256 * 256


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
    if a.arch == "llama":
        K = a.kv_heads or a.heads
        model = Llama(a.vocab, a.hidden, a.heads, K, a.ffn_hidden or llama_ffn_hidden(a.hidden), a.layers, a.seq_len)
    else:
        model = GPT(a.vocab, a.hidden, a.heads, a.layers, a.seq_len)
    n_params = sum(p.numel() for p in model.parameters())
    step_model = torch.compile(model) if a.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    gen = torch.Generator().manual_seed(1)
    step_ms, losses = [], []
    for step in range(1, a.steps + 1):
        batch = torch.randint(0, a.vocab, (a.batch, a.seq_len + 1), generator=gen)
        inputs, targets = batch[:, :-1], batch[:, 1:]
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = step_model(inputs, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step_ms.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss.item())
    timed = step_ms[a.warmup:]
    tokens = a.batch * a.seq_len
    return {"program": "pytorch", "torch": torch.__version__, "compiled": a.compile, "arch": a.arch,
            "threads": torch.get_num_threads(), "precision": a.precision,
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
    ap.add_argument("--arch", choices=("gpt2", "llama"), default="gpt2")
    ap.add_argument("--kv-heads", type=int, default=0, help="llama: kv heads (0: as many as heads)")
    ap.add_argument("--ffn-hidden", type=int, default=0, help="llama: SwiGLU size (0: Llama's default)")
    ap.add_argument("--compile", action="store_true", help="train the model under torch.compile (PyTorch 2)")
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
