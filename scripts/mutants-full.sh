#!/usr/bin/env bash
# Every mutant of one hot module of mmkit, in two stages (docs/testing.md,
# "Full runs"):
#   1. each mutant judged by the module's main model tests alone (fewer test
#      binaries rebuilt per mutant);
#   2. the survivors and timeouts of stage 1 judged again by every judge
#      test of the module (model and hostile-input tests).
# A mutant is caught when either stage catches it, as if every judge had
# run on it. Results: mutants.out/MODULE-1 and mutants.out/MODULE-2.
#
# Usage: scripts/mutants-full.sh MODULE [JOBS] [-- extra cargo-mutants args]
#   MODULE: tree, vmap, buddy, percpu, vblock or nodes; JOBS: parallel builds
#   (default 1; each job copies the tree and builds it once, cold).
# Needs cargo-mutants (cargo install cargo-mutants).
set -euo pipefail
cd "$(dirname "$0")/.."
module=${1:?module: tree, vmap, buddy, percpu, vblock or nodes}
shift
jobs=1
if [[ $# -gt 0 && $1 != -- ]]; then
  jobs=$1
  shift
fi
[[ ${1:-} == -- ]] && shift
# shellcheck source=scripts/mutants-judges.sh
. scripts/mutants-judges.sh
read -ra main <<<"$(main_judges "$module")" || true
read -ra all <<<"$(judges "$module")" || true
[[ ${#all[@]} -gt 0 ]] || { echo "unknown module: $module" >&2; exit 2; }
test_flags() { for t in "$@"; do printf -- '-C --test=%s ' "$t"; done; }
# A failing proptest case is not shrunk (the first failure is enough) nor
# saved: a case saved under one mutant is replayed under every later one,
# and one that also fails the unmutated code would "catch" them all.
export PROPTEST_MAX_SHRINK_ITERS=0 PROPTEST_DISABLE_FAILURE_PERSISTENCE=1
out=mutants.out
mkdir -p "$out"
common=(--no-shuffle --timeout 10 --build-timeout 600 -j "$jobs" --file "mmkit/src/$module/**")
# cargo-mutants exits 2 when mutants are missed and 3 on timeouts: both are
# results here, not failures.
mutants() {
  cargo mutants "$@" && return 0
  local rc=$?
  [[ $rc -eq 2 || $rc -eq 3 ]]
}
# shellcheck disable=SC2046
mutants "${common[@]}" --output "$out/$module-1" $(test_flags "${main[@]}") "$@"
# Stage 2 starts from stage 1's caught and unviable mutants (--iterate).
mkdir -p "$out/$module-2/mutants.out"
cp "$out/$module-1/mutants.out/caught.txt" "$out/$module-1/mutants.out/unviable.txt" "$out/$module-2/mutants.out/"
# shellcheck disable=SC2046
mutants "${common[@]}" --iterate --output "$out/$module-2" $(test_flags "${all[@]}") "$@"
for stage in 1 2; do
  echo "stage $stage: $(wc -l < "$out/$module-$stage/mutants.out/caught.txt") caught," \
    "$(wc -l < "$out/$module-$stage/mutants.out/missed.txt") missed," \
    "$(wc -l < "$out/$module-$stage/mutants.out/timeout.txt") timeouts"
done
