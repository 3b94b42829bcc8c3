#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 60) on the stable
# toolchain (--sanitizer none: no -Z flags). Findings land in
# fuzz/artifacts/TARGET/; add each as a regression test in
# mmkit/tests/fuzz_driver.rs (mmkit-vm/tests/vm_fuzz_driver.rs for `vm`).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz missing: cargo install cargo-fuzz" >&2; exit 2; }
for t in $(cargo fuzz list); do
  echo "== fuzz $t (${secs}s)"
  cargo fuzz run --sanitizer none --release "$t" -- -max_total_time="$secs" -max_len=4096
done
