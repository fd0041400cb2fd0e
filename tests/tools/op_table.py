#!/usr/bin/env python3
"""The op-by-device table (docs/ops.md) from the one list of kernels, kernels/op_list.h, and the
checks that keep the list true.

  python3 tests/tools/op_table.py [--write] [SOURCE_DIR]

Without --write (the test unit.op_table): fails, naming each problem, when docs/ops.md is not what
the list gives, when an op's file (kernels/cpu/<file>.cpp, kernels/cuda/<file>.cu or .cpp) is
missing or does not define the op, or when an op with a CUDA kernel has no twin test: no file
tests/cuda/test_cuda_*.cpp calls its CUDA kernel (gpu::<name> or cuda::<name>, or ops::<name> on
device tensors). With --write: writes docs/ops.md (after the same checks of the sources).
"""
import os
import re
import sys

DEVICES = ("cpu_and_cuda", "cpu_only", "cuda_only")


def strip_comments(text):
    return re.sub(r"//[^\n]*", "", text)


def parse_ops(list_text):
    """[(group, file, name, devices)] in the list's order; group from the '// ---- X ----' lines."""
    ops = []
    code = list_text
    # Walk the lines for group headings, and the entries with balanced parentheses.
    entry_re = re.compile(r"^TESSERA_OP\(", re.M)
    headings = [(m.start(), m.group(1).strip()) for m in re.finditer(r"^// ---- (.*?) -*$", code, re.M)]
    for m in entry_re.finditer(code):
        depth, i = 0, m.end() - 1
        while True:
            c = code[i]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        body = strip_comments(code[m.end():i])
        fields = [f.strip() for f in body.split(",", 3)]
        if len(fields) < 4:
            raise SystemExit(f"op_list.h: an entry with fewer than 5 fields near offset {m.start()}")
        file, name, devices = fields[0], fields[1], fields[2]
        if devices not in DEVICES:
            raise SystemExit(f"op_list.h: {name}: devices must be one of {', '.join(DEVICES)}, got {devices}")
        group = ""
        for start, title in headings:
            if start < m.start():
                group = title
        ops.append((group, file, name, devices))
    if not ops:
        raise SystemExit("op_list.h: no TESSERA_OP entries found")
    names = [o[2] for o in ops]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SystemExit(f"op_list.h: declared more than once: {', '.join(dupes)}")
    return ops


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def defines(text, name):
    """Whether a source defines the function name (a line starting at column 0 naming it)."""
    return re.search(r"^[A-Za-z_][^\n;]*\b%s\(" % re.escape(name), text, re.M) is not None


def cuda_source(src, file):
    for ext in (".cu", ".cpp"):
        if os.path.exists(os.path.join(src, "kernels", "cuda", file + ext)):
            return f"kernels/cuda/{file}{ext}"
    return None


def twin_tests(src):
    folder = os.path.join(src, "tests", "cuda")
    return {name: strip_comments(read(os.path.join(folder, name)))
            for name in sorted(os.listdir(folder)) if re.fullmatch(r"test_cuda_\w+\.cpp", name)}


def table(src, ops, problems):
    tests = twin_tests(src)
    rows = []
    for group, file, name, devices in ops:
        cpu_src = cuda_src = test = ""
        if devices != "cuda_only":
            cpu_src = f"kernels/cpu/{file}.cpp"
            path = os.path.join(src, cpu_src)
            if not os.path.exists(path):
                problems.append(f"{name}: {cpu_src} does not exist (op_list.h names file {file})")
            elif not defines(read(path), name):
                problems.append(f"{name}: {cpu_src} does not define it")
        if devices != "cpu_only":
            cuda_src = cuda_source(src, file)
            if cuda_src is None:
                problems.append(f"{name}: neither kernels/cuda/{file}.cu nor .cpp exists (op_list.h names file {file})")
                cuda_src = ""
            elif not defines(read(os.path.join(src, cuda_src)), name):
                problems.append(f"{name}: {cuda_src} does not define it")
            call = re.compile(r"\b(gpu|cuda|ops)::%s\b" % re.escape(name))
            # The file named after the op's own file first, then any other.
            preferred = f"test_cuda_{file}.cpp"
            order = ([preferred] if preferred in tests else []) + [t for t in tests if t != preferred]
            test = next((t for t in order if call.search(tests[t])), "")
            if not test:
                problems.append(f"{name}: no twin test: no tests/cuda/test_cuda_*.cpp calls its CUDA kernel "
                                f"(expected in tests/cuda/{preferred})")
            else:
                test = f"tests/cuda/{test}"
        rows.append((group, name, devices, cpu_src, cuda_src, test))
    return rows


def markdown(rows):
    both = sum(1 for r in rows if r[2] == "cpu_and_cuda")
    cpu = sum(1 for r in rows if r[2] == "cpu_only")
    cuda = sum(1 for r in rows if r[2] == "cuda_only")
    out = [
        "# Ops by device",
        "",
        "Generated from `kernels/op_list.h` by `python3 tests/tools/op_table.py --write`; do not edit.",
        "The test `unit.op_table` fails when this page is stale, when a source named here does not",
        "define its op, or when an op with a CUDA kernel has no twin test in `tests/cuda/` (each twin",
        "test runs the CUDA kernel against the CPU one, on a GPU). How to add an op: docs/testing.md,",
        "\"Kernels and their twins\".",
        "",
        f"{len(rows)} kernels: {both} on the CPU and CUDA, {cpu} on the CPU only, {cuda} on CUDA only "
        "(a variant whose CPU twin is another op, named in op_list.h).",
        "",
    ]
    group = None
    for i, (g, name, devices, cpu_src, cuda_src, test) in enumerate(rows):
        if g != group:
            group = g
            out += [f"## {g}", "", "| op | CPU | CUDA | CPU source | CUDA source | twin test |",
                    "|---|---|---|---|---|---|"]
        on_cpu = "yes" if devices != "cuda_only" else "-"
        on_cuda = "yes" if devices != "cpu_only" else "-"
        cell = lambda s: f"`{s}`" if s else "-"
        out.append(f"| `{name}` | {on_cpu} | {on_cuda} | {cell(cpu_src)} | {cell(cuda_src)} | {cell(test)} |")
        if i + 1 == len(rows) or rows[i + 1][0] != g:
            out.append("")
    return "\n".join(out)


def main(argv):
    write = "--write" in argv
    rest = [a for a in argv if a != "--write"]
    if len(rest) > 1 or any(a.startswith("-") for a in rest):
        raise SystemExit("usage: op_table.py [--write] [SOURCE_DIR]")
    src = rest[0] if rest else os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    list_path = os.path.join(src, "kernels", "op_list.h")
    if not os.path.exists(list_path):
        raise SystemExit(f"{list_path} does not exist: pass the source folder")
    ops = parse_ops(read(list_path))
    problems = []
    page = markdown(table(src, ops, problems))
    page_path = os.path.join(src, "docs", "ops.md")
    if write:
        with open(page_path, "w", encoding="utf-8") as f:
            f.write(page)
        print(f"wrote {page_path}: {len(ops)} ops")
    elif not os.path.exists(page_path) or read(page_path) != page:
        problems.append("docs/ops.md is stale: run python3 tests/tools/op_table.py --write")
    for p in problems:
        print("op_table: " + p, file=sys.stderr)
    if problems:
        return 1
    print(f"op_table: {len(ops)} ops, every source defines its op, every CUDA kernel has a twin test, "
          "docs/ops.md is current")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
