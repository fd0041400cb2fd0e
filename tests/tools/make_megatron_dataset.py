#!/usr/bin/env python3
"""Writes a tiny Megatron-LM indexed data set (PREFIX.bin + PREFIX.idx, "MMIDIDX" version 1) for tests.

usage: make_megatron_dataset.py --prefix PREFIX --dtype uint16|int32|... --docs JSON [--corrupt KIND]

--docs is a JSON list of documents, each a list of sequences, each a list of token ids:
'[[[1, 2, 3], [4]], [[5, 6]]]' is two documents, the first of two sequences.
--corrupt spoils the result for bad-input tests: bad-magic, bad-version, bad-dtype,
truncate-bin (the .bin loses its last byte), decreasing-pointers (pointers[1] < pointers[0]),
doc-index-range (the last document index past the sequence count), count-mismatch (the header's
sequence count one more than the arrays), multimodal (an int8 sequence mode per sequence after the
document indices, as Megatron's multimodal indices have).

Written from the format's public description with numpy, independently of tessera's C++ reader:
magic "MMIDIDX\\0\\0", version u64, dtype code u8, sequence count u64, document index count u64,
sizes int32[S], pointers int64[S] (byte offsets into the .bin), document indices int64[D]
(0, the first sequence of each later document, S), all little-endian.
"""
import argparse
import json
import struct

import numpy as np

CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "uint16": 8}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--dtype", required=True, choices=sorted(CODES))
    ap.add_argument("--docs", required=True, help="JSON: documents, each a list of sequences of ids")
    ap.add_argument("--corrupt", choices=["bad-magic", "bad-version", "bad-dtype", "truncate-bin",
                                          "decreasing-pointers", "doc-index-range", "count-mismatch", "multimodal"])
    a = ap.parse_args()
    docs = json.loads(a.docs)
    dtype = np.dtype(a.dtype).newbyteorder("<")
    sequences = [np.asarray(s, dtype=np.int64) for d in docs for s in d]
    sizes = np.array([len(s) for s in sequences], dtype="<i4")
    pointers = np.zeros(len(sequences), dtype="<i8")
    if len(sequences) > 1:
        pointers[1:] = np.cumsum(sizes[:-1].astype(np.int64)) * dtype.itemsize
    doc_index = np.zeros(len(docs) + 1, dtype="<i8")
    doc_index[1:] = np.cumsum([len(d) for d in docs])

    with open(a.prefix + ".bin", "wb") as f:
        for s in sequences:
            f.write(s.astype(dtype).tobytes())
    if a.corrupt == "truncate-bin":
        with open(a.prefix + ".bin", "r+b") as f:
            f.truncate(max(0, f.seek(0, 2) - 1))
    if a.corrupt == "decreasing-pointers":
        pointers[1] = pointers[0] - dtype.itemsize
    if a.corrupt == "doc-index-range":
        doc_index[-1] = len(sequences) + 1

    magic = b"MMIDIX\x00\x00\x00" if a.corrupt == "bad-magic" else b"MMIDIDX\x00\x00"
    version = 2 if a.corrupt == "bad-version" else 1
    code = 9 if a.corrupt == "bad-dtype" else CODES[a.dtype]
    count = len(sequences) + (1 if a.corrupt == "count-mismatch" else 0)
    with open(a.prefix + ".idx", "wb") as f:
        f.write(magic)
        f.write(struct.pack("<QBQQ", version, code, count, len(doc_index)))
        f.write(sizes.tobytes())
        f.write(pointers.tobytes())
        f.write(doc_index.tobytes())
        if a.corrupt == "multimodal":
            f.write(np.zeros(len(sequences), dtype=np.int8).tobytes())


if __name__ == "__main__":
    main()
