# The Hugging Face baseline of the decode benchmark (decode_cpu.sh): transformers' generate on a
# folder export-hf wrote, greedy with its KV cache (use_cache=True), float32, on the prompts of a
# tessera --prompts file ({"ids": [...]} per line), all of them in one batch. Decode tokens/s is
# taken as batch x (N - 1) / (t(N new tokens) - t(1 new token)): the time after the prefill's
# token, best of --reps runs of each after a warm-up. Writes one JSON object (to --json and stdout).
import argparse
import json
import time

import torch
import transformers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="the export-hf folder")
    ap.add_argument("--prompts", required=True, help="JSONL, one {\"ids\": [...]} per line, equal lengths")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    if a.new_tokens < 2:
        ap.error("--new-tokens must be >= 2 (decode time is t(N) - t(1))")
    torch.set_num_threads(a.threads)
    with open(a.prompts) as f:
        rows = [json.loads(line)["ids"] for line in f if line.strip()]
    if not rows or len({len(r) for r in rows}) != 1:
        raise SystemExit(f"error: {a.prompts}: needs prompts of one length (no padding), got lengths "
                         f"{sorted({len(r) for r in rows})}")
    ids = torch.tensor(rows, dtype=torch.long)
    try:  # transformers 5 names it dtype; 4.x torch_dtype
        model = transformers.AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    except TypeError:
        model = transformers.AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=torch.float32)
    model.eval()

    def run(n):
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, use_cache=True,
                                 max_new_tokens=n, min_new_tokens=n, pad_token_id=0)
            sec = time.perf_counter() - t0
        if out.shape != (ids.shape[0], ids.shape[1] + n):
            raise SystemExit(f"error: generate returned shape {tuple(out.shape)}, expected "
                             f"{(ids.shape[0], ids.shape[1] + n)}")
        return sec, out

    run(2)  # warm-up
    t1 = min(run(1)[0] for _ in range(a.reps))
    runs = [run(a.new_tokens) for _ in range(a.reps)]
    tn = min(sec for sec, _ in runs)
    batch = ids.shape[0]
    result = {
        "program": "transformers", "transformers": transformers.__version__, "torch": torch.__version__,
        "threads": a.threads, "batch": batch, "prompt_len": ids.shape[1], "new_tokens": a.new_tokens,
        "seconds_1": t1, "seconds_n": tn,
        "decode_tokens_per_s": batch * (a.new_tokens - 1) / (tn - t1),
        "first_completion": runs[0][1][0, ids.shape[1]:].tolist(),
    }
    with open(a.json, "w") as f:
        json.dump(result, f)
    print(json.dumps({k: v for k, v in result.items() if k != "first_completion"}))


if __name__ == "__main__":
    main()
