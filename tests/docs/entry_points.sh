#!/usr/bin/env bash
# The README's two commands, which the docs test cannot run (they install packages and build;
# the suite is what one of them runs): both exist, are executable and parse; CI (.ci/run) runs
# tests/run_all.sh, the README's test command, over every label; install_deps.sh and build.sh,
# which both call, parse too and refuse an unknown part. What quickstart trains (data_prep synth,
# inputs/gpt_tiny.ini) is checked by train.synth_convergence. Every app apps/CMakeLists.txt builds
# (generate among them) is built, answers --version and is named in the README.
set -euo pipefail
build=$1; src=$2
fail() { echo "error: $*" >&2; exit 1; }
for s in jobscripts/quickstart.sh tests/run_all.sh jobscripts/install_deps.sh jobscripts/build.sh .ci/run; do
  [ -x "$src/$s" ] || fail "$s is missing or not executable"
  bash -n "$src/$s" || fail "$s does not parse"
done
grep -qx 'exec tests/run_all.sh' "$src/.ci/run" || fail ".ci/run does not exec tests/run_all.sh (the README's test command)"
grep -q '^jobscripts/quickstart.sh ' "$src/README.md" || fail "README.md does not show jobscripts/quickstart.sh"
grep -q '^tests/run_all.sh ' "$src/README.md" || fail "README.md does not show tests/run_all.sh"
# run_all.sh runs ctest over every label: no -L or -R in its main part's call
main=$(grep -m1 'ctest --output-on-failure' "$src/tests/run_all.sh")
case $main in *" -L "*|*" -R "*) fail "tests/run_all.sh's main ctest call selects labels: $main" ;; esac
grep -q 'install_deps.sh' "$src/jobscripts/quickstart.sh" && grep -q 'build.sh' "$src/jobscripts/quickstart.sh" ||
  fail "quickstart.sh no longer installs and builds"
grep -q 'inputs/gpt_tiny.ini' "$src/jobscripts/quickstart.sh" || fail "quickstart.sh no longer trains inputs/gpt_tiny.ini"
set +e
out=$("$src/jobscripts/install_deps.sh" nonsense 2>&1); rc=$?
set -e
[ $rc = 2 ] && [[ $out == *"unknown part 'nonsense'"* ]] || fail "install_deps.sh nonsense: exit $rc, $out"
# Every executable apps/CMakeLists.txt builds is built, answers --version and is named in README.md.
apps=$(sed -n 's/^foreach(app \(.*\))$/\1/p' "$src/apps/CMakeLists.txt")
[ -n "$apps" ] || fail "apps/CMakeLists.txt no longer lists its executables in one foreach(app ...)"
for app in $apps; do
  "$build/apps/$app" --version >/dev/null 2>&1 || fail "$build/apps/$app --version failed (is it built?)"
  grep -q "\`$app\`" "$src/README.md" || fail "README.md does not name \`$app\`"
done
echo "entry points: quickstart.sh, run_all.sh (.ci/run), install_deps.sh, build.sh present and parse; apps: $apps"
