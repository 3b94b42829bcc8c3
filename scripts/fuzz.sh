#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 60) on the stable
# toolchain (--sanitizer none: no -Z flags). Findings land in
# fuzz/artifacts/TARGET/; add each as a regression test in
# mmkit/tests/fuzz_driver.rs (mmkit-vm/tests/vm_fuzz_driver.rs for `vm`;
# the trace target: mmkit-cli/src/trace.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz missing: cargo install cargo-fuzz" >&2; exit 2; }
for t in $(cargo fuzz list); do
  echo "== fuzz $t (${secs}s)"
  extra=()
  if [ "$t" = trace ]; then
    # The trace parser (mmkit_cli::trace): seeded with the committed traces
    # and the format's words; findings go in mmkit-cli/src/trace.rs's tests.
    mkdir -p fuzz/corpus/trace
    extra=(fuzz/corpus/trace mmkit-cli/traces -- -dict=fuzz/trace.dict)
  else
    extra=(--)
  fi
  cargo fuzz run --sanitizer none --release "$t" "${extra[@]}" -max_total_time="$secs" -max_len=4096
done
