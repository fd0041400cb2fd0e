#!/usr/bin/env python3
"""tokenizer.json oracle: trains a byte-level BPE on a text with Hugging Face's `tokenizers`
(GPT-2-style, Llama-3-style or Qwen-2-style: its regex and the NFC normalizer), then checks that `data_prep text --tokenizer` gives
the package's ids (encode(text, add_special_tokens=False)) on the whole text, on non-ASCII text, on
whitespace runs and around special tokens, that the merges' ["a", "b"] form reads as the "a b" form,
and that `data_prep decode` gives the text back byte for byte (Qwen 2 style: the text in NFC).

usage: hf_bpe_oracle.py --data-prep PATH --text FILE --style gpt2|llama3|qwen2 --work DIR
"""
import argparse
import os
import subprocess
import sys
import unicodedata

import h5py
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")
SPECIALS = {"gpt2": ["<|endoftext|>"], "llama3": ["<|begin_of_text|>", "<|end_of_text|>"],
            "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]}

# Text the corpus does not hold: letters, marks and digits of other scripts, 4-byte characters,
# Unicode spaces, and whitespace runs of every kind.
NON_ASCII = ("Café naïve façade — “quoted” ‘single’ … 1½ ¾\n"
             "Ελληνικά κείμενα, русский текст, ქართული, עברית, العربية ٣٤٥, हिन्दी १२३\n"
             "日本語のテキスト、中文文本。한국어 텍스트 Ⅻ ⅷ ²³ ①②\n"
             "emoji 🙂👍🏽 👨‍👩‍👧 flags 🇫🇷 math 𝔘𝔫𝔦 e\u0301 a\u0308 \u00a0nbsp\u2003em\u3000ideo\u2028ls\u0085nel\n"
             "ﬁ ligature, ＦＵＬＬＷＩＤＴＨ １２３, ZWJ\u200dZWNJ\u200c soft\u00adhyphen\n")
WHITESPACE = ("a  b   c    d\t\te\t \tf\n\n\ng \n \n h\r\n\r\ni   \n   j\u00a0\u00a0k\u3000\u3000l"
              "        \n\t\t\n   trailing   \n\n\n   leading\v\fvtab    ")
NUMBERS = "1 12 123 1234 12345 3.14159 2024-01-31 $1,000,000.00 0x1F 10e-5 I'm you'll they'd WE'RE He'S"


def specials_text(style):
    s = SPECIALS[style]
    return f"{s[0]}Hello{s[-1]} world{s[0]}{s[0]}  {s[-1]}\nx{s[0][:-1]} partial {s[-1]}end"


def train(text_path, style, vocab_size):
    if style == "gpt2":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tok = Tokenizer(models.BPE(ignore_merges=style == "llama3"))
        if style == "qwen2":
            tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_REGEX if style == "llama3" else QWEN2_REGEX), behavior="isolated",
                                 invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS[style], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([text_path], trainer)
    return tok


def data_prep_ids(data_prep, tokenizer_json, text_path, h5):
    subprocess.run([data_prep, "text", "--input", text_path, "--tokenizer", tokenizer_json, "--output", h5,
                    "--val-fraction", "0", "--overwrite"], check=True, stdout=subprocess.DEVNULL)
    with h5py.File(h5, "r") as f:
        return [int(x) for x in f["/train/tokens"][()]], int(f.attrs["vocab_size"])


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-prep", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--style", required=True, choices=["gpt2", "llama3", "qwen2"])
    ap.add_argument("--work", required=True)
    ap.add_argument("--vocab", type=int, default=1000)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    tok = train(args.text, args.style, args.vocab)
    tokenizer_json = os.path.join(args.work, "tokenizer.json")
    tok.save(tokenizer_json)

    with open(args.text, encoding="utf-8") as f:
        corpus = f.read()
    cases = {"whole text": corpus, "non-ASCII": NON_ASCII, "whitespace runs": WHITESPACE,
             "numbers and contractions": NUMBERS, "special tokens": specials_text(args.style),
             "corpus start with non-ASCII and whitespace": corpus[:3000] + NON_ASCII + WHITESPACE}
    failures = 0
    for name, text in cases.items():
        path = os.path.join(args.work, "case.txt")
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        want = tok.encode(text, add_special_tokens=False).ids
        got, vocab = data_prep_ids(args.data_prep, tokenizer_json, path, os.path.join(args.work, "case.h5"))
        if vocab != tok.get_vocab_size():
            print(f"FAIL {args.style} {name}: vocab_size {vocab}, the package's {tok.get_vocab_size()}")
            failures += 1
        if got != want:
            i = first_difference(got, want)
            print(f"FAIL {args.style} {name}: ids differ at {i} of {len(want)} (data_prep {len(got)} ids):"
                  f" data_prep {got[max(0, i - 3):i + 5]} package {want[max(0, i - 3):i + 5]}"
                  f" tokens {[tok.id_to_token(t) for t in want[max(0, i - 3):i + 5]]}")
            failures += 1
        back = (unicodedata.normalize("NFC", text) if args.style == "qwen2" else text).encode("utf-8")
        decoded = subprocess.run([args.data_prep, "decode", "--input", os.path.join(args.work, "case.h5")],
                                 check=True, stdout=subprocess.PIPE).stdout
        if decoded != back:
            i = first_difference(decoded, back)
            print(f"FAIL {args.style} {name}: decode(encode(text)) differs from the text at byte {i}:"
                  f" {decoded[max(0, i - 10):i + 10]!r} vs {back[max(0, i - 10):i + 10]!r}")
            failures += 1
        if got == want and decoded == back:
            print(f"ok {args.style} {name}: {len(want)} ids equal the package's; decode gives the text back")

    # The merges in the ["a", "b"] form (tokenizers >= 0.20 writes it) read as the "a b" form.
    import json
    with open(tokenizer_json, encoding="utf-8") as f:
        j = json.load(f)
    j["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in j["model"]["merges"]]
    pairs_json = os.path.join(args.work, "tokenizer_pairs.json")
    with open(pairs_json, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    path = os.path.join(args.work, "case.txt")
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(cases["corpus start with non-ASCII and whitespace"])
    got, _ = data_prep_ids(args.data_prep, pairs_json, path, os.path.join(args.work, "case.h5"))
    want = tok.encode(cases["corpus start with non-ASCII and whitespace"], add_special_tokens=False).ids
    if got != want:
        print(f"FAIL {args.style}: the merges' pair form gives other ids (first difference at"
              f" {first_difference(got, want)})")
        failures += 1
    else:
        print(f"ok {args.style}: the merges' [\"a\", \"b\"] form gives the same {len(got)} ids")
    if failures:
        print(f"FAIL: {failures} check(s) failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
