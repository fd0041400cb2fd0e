#!/usr/bin/env python3
"""The docs test: every shell command block of README.md and docs/*.md runs, on tiny data.

usage: tests/docs/doc_commands.py BUILD_DIR SOURCE_DIR [FILE.md ...]
       tests/docs/doc_commands.py --registered BUILD_DIR SOURCE_DIR

The second form runs nothing: it checks that every page with command blocks has its CTest test
(docs.commands.<page>, registered at configure time) and that every marker names existing tests.

A block is a fenced block whose language is sh, bash or console. An sh/bash block runs as one
bash script (set -euo pipefail); a console block runs its "$ " lines (and their "\\" continuation
lines) and ignores the output shown. The blocks of one file run in order, in a fresh folder that
holds what the commands name from the repository (build/, inputs/, jobscripts/, tests/,
validation/, docs/, README.md), so a page's later blocks use what its earlier ones made.

Kept fast: build/apps/gpt_train, moe_train and vit_train are shims that add --steps 2 to a run
whose command line sets no --steps or --epochs (vit_train: --epochs 0 --steps 2); mpirun is
the MPI launcher with --oversubscribe; OMP_NUM_THREADS=1.

A block that cannot run here (a real Slurm cluster, a GPU, a download) is preceded by the marker
<!-- docs-test: covered by TEST[, TEST ...] --> naming the CTest tests that cover it instead; the
test fails if a named test does not exist (ctest -N in BUILD_DIR), and if a marker is not followed
by a command block.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

MARKER = re.compile(r"<!--\s*docs-test:\s*covered by\s+(.+?)\s*-->")
FENCE = re.compile(r"^```(\S*)\s*$")
LANGUAGES = ("sh", "bash", "console")
TRAINERS = ("gpt_train", "moe_train", "vit_train")
LINKED = ("inputs", "jobscripts", "tests", "validation", "docs", "README.md")


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


def blocks_of(path):
    """(first line number, language, text, covered-by list or None) of each command block."""
    out, lines = [], open(path, encoding="utf-8").read().split("\n")
    marker, i = None, 0
    while i < len(lines):
        m = MARKER.search(lines[i])
        if m:
            marker = (i + 1, [t.strip() for t in m.group(1).split(",") if t.strip()])
            i += 1
            continue
        f = FENCE.match(lines[i])
        if not f:
            if lines[i].strip() and marker:
                fail(f"{path}:{marker[0]}: a docs-test marker must come right before a command block")
            i += 1
            continue
        start, language, body = i + 1, f.group(1), []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        if language in LANGUAGES:
            out.append((start, language, "\n".join(body), marker[1] if marker else None))
        elif marker:
            fail(f"{path}:{marker[0]}: a docs-test marker must come right before a command block (sh, bash, console)")
        marker = None
    return out


def console_script(text):
    """The commands of a console block: its "$ " lines with their continuation lines."""
    commands, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        if lines[i].startswith("$ "):
            command = lines[i][2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command += "\n" + lines[i]
            commands.append(command)
        i += 1
    return "\n".join(commands)


def make_shims(build, shims, mpiexec):
    """build/apps with the trainers wrapped, the other executables linked; an mpirun wrapper."""
    apps = os.path.join(shims, "build", "apps")
    os.makedirs(apps)
    for name in os.listdir(os.path.join(build, "apps")):
        real = os.path.join(build, "apps", name)
        if not (os.path.isfile(real) and os.access(real, os.X_OK)):
            continue
        if name not in TRAINERS:
            os.symlink(real, os.path.join(apps, name))
            continue
        short = "--epochs 0 --steps 2" if name == "vit_train" else "--steps 2"
        with open(os.path.join(apps, name), "w") as f:
            f.write(f"""#!/usr/bin/env bash
# docs test shim (tests/docs/doc_commands.py): a run that sets no length gets a short one.
for a in "$@"; do
  case $a in --steps|--steps=*|--epochs|--epochs=*|--help|--version|--dry-run) exec {real} "$@" ;; esac
done
exec {real} "$@" {short}
""")
        os.chmod(os.path.join(apps, name), 0o755)
    bin_dir = os.path.join(shims, "bin")
    os.makedirs(bin_dir)
    with open(os.path.join(bin_dir, "mpirun"), "w") as f:
        f.write(f"#!/usr/bin/env bash\nexec {mpiexec} --oversubscribe \"$@\"\n")
    os.chmod(os.path.join(bin_dir, "mpirun"), 0o755)
    return bin_dir


def ctest_names(build):
    r = subprocess.run(["ctest", "-N"], cwd=build, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"ctest -N in {build} failed: {r.stderr}")
    return set(re.findall(r"Test\s+#\d+: (\S+)", r.stdout))


def all_pages(src):
    return ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(src, "docs")) if f.endswith(".md"))


def check_registered(build, src):
    known, failures, pages = ctest_names(build), [], 0
    for name in all_pages(src):
        blocks = blocks_of(os.path.join(src, name))
        if not blocks:
            continue
        pages += 1
        test = "docs.commands." + os.path.splitext(os.path.basename(name))[0]
        if test not in known:
            failures.append(f"{name} has {len(blocks)} command block(s) but ctest has no {test}: configure again")
        for line, _, _, tests in blocks:
            for t in tests or []:
                if t not in known:
                    failures.append(f"{name}:{line}: the docs-test marker names a test that ctest does not have: {t}")
    print(f"{pages} pages with command blocks, each with its test")
    for f in failures:
        print(f"error: {f}", file=sys.stderr)
    sys.exit(1 if failures or pages == 0 else 0)


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--registered":
        if len(sys.argv) != 4:
            fail("usage: doc_commands.py --registered BUILD_DIR SOURCE_DIR")
        check_registered(os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3]))
    if len(sys.argv) < 3:
        fail("usage: doc_commands.py BUILD_DIR SOURCE_DIR [FILE.md ...]")
    build, src = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    files = sys.argv[3:] or all_pages(src)
    mpiexec = os.environ.get("TESSERA_MPIEXEC") or shutil.which("mpirun") or fail("no mpirun found")
    known = ctest_names(build)
    total_start, ran, covered, failures = time.time(), 0, 0, []
    for name in files:
        path = os.path.join(src, name)
        blocks = blocks_of(path)
        work = tempfile.mkdtemp(prefix="tessera_docs_")
        try:
            bin_dir = make_shims(build, work, mpiexec)
            for item in LINKED:
                os.symlink(os.path.join(src, item), os.path.join(work, item))
            env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""), OMP_NUM_THREADS="1",
                       OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
            for line, language, text, tests in blocks:
                where = f"{name}:{line}"
                if tests is not None:
                    missing = [t for t in tests if t not in known]
                    if missing:
                        failures.append(f"{where}: the docs-test marker names tests that ctest does not have: {missing}")
                    covered += 1
                    print(f"{where}: covered by {', '.join(tests)}")
                    continue
                script = console_script(text) if language == "console" else text
                if not script.strip():
                    failures.append(f"{where}: a {language} block with no command")
                    continue
                start = time.time()
                r = subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], cwd=work, env=env,
                                   capture_output=True, text=True, timeout=300)
                ran += 1
                print(f"{where}: {language} block, exit {r.returncode}, {time.time() - start:.1f} s")
                if r.returncode != 0:
                    tail = (r.stdout[-1500:] + "\n" + r.stderr[-2500:]).strip()
                    failures.append(f"{where}: the {language} block failed (exit {r.returncode}):\n{script}\n--- output:\n{tail}")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{ran} blocks ran, {covered} covered by other tests, {len(files)} files, {time.time() - total_start:.0f} s")
    if ran + covered == 0:
        failures.append("no command block found: the documents or the parser changed")
    for f in failures:
        print(f"error: {f}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
