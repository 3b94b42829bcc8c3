#!/usr/bin/env bash
# Runs mmkit-vm's tests (the crate with unsafe code) under valgrind memcheck:
# invalid reads and writes, uses of uninitialised memory and definite leaks
# fail the run. Usage: scripts/valgrind.sh [extra test-binary args]
# Needs valgrind (Debian: apt-get install valgrind). Valgrind cannot reserve the
# default 64 GiB of address space, so these tests configure at most 4 GiB.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind not installed"; exit 1; }

# Fewer proptest cases: memcheck runs code about 30x slower.
export PROPTEST_CASES="${PROPTEST_CASES:-4}"
bins=$(cargo test -p mmkit-vm --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] in ("mmkit_vm","vm_model","vm_threads","vm_faults","vm_errors","vm_budget","vm_kernel_limits"):
        print(m["executable"])')
status=0
for b in $bins; do
  echo "== valgrind $(basename "$b")"
  # Skipped: the test that fills the default mapping budget (tens of
  # thousands of mappings), more than valgrind's own segment table holds.
  valgrind --quiet --error-exitcode=99 --leak-check=full --show-possibly-lost=no --errors-for-leak-kinds=definite \
    "$b" --test-threads=1 --skip lazy_areas_purge_at_the_default_budget "$@" || status=$?
done
exit "$status"
