#!/usr/bin/env bash
# Runs every cargo-fuzz target listed in fuzz/Cargo.toml for a short budget each and fails on
# the first crash, printing the reproducer. The long run is the same script with a bigger
# budget (docs/fuzzing.md):
#
#   bash .ci/fuzz.sh                          # CI: IDEM_FUZZ_SECONDS=15 per target
#   IDEM_FUZZ_SECONDS=600 bash .ci/fuzz.sh    # long run, 10 minutes per target
#   bash .ci/fuzz.sh fingerprint derive       # only these targets
#
# Settings (environment):
#   IDEM_FUZZ_SECONDS    budget per target in seconds (default 15)
#   IDEM_FUZZ_SANITIZER  cargo-fuzz sanitizer (default none: the workspace forbids unsafe
#                        code; `address` is cargo-fuzz's own default)
#   IDEM_FUZZ_TARGET_DIR build directory (default $HOME/.cache/idem/fuzz-target)
#   IDEM_FUZZ_WORK       where the working corpus and crash artifacts go (default
#                        $HOME/.cache/idem/fuzz-work); fuzz/corpus/ in the clone is only read
#
# cargo-fuzz needs nightly-only flags; on the stable toolchain RUSTC_BOOTSTRAP=1 allows them.
# It is installed once into $HOME/.cache/idem/cargo-tools (outside the clone).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${IDEM_FUZZ_SECONDS:-15}"
sanitizer="${IDEM_FUZZ_SANITIZER:-none}"
target_dir="${IDEM_FUZZ_TARGET_DIR:-$HOME/.cache/idem/fuzz-target}"
work="${IDEM_FUZZ_WORK:-$HOME/.cache/idem/fuzz-work}"
tools="$HOME/.cache/idem/cargo-tools"
export PATH="$tools/bin:$HOME/.cargo/bin:$PATH"
export RUSTC_BOOTSTRAP=1
export CARGO_TERM_COLOR=never

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz into $tools"
  CARGO_INSTALL_ROOT="$tools" cargo install cargo-fuzz --locked --version 0.13.2
fi
cargo fuzz --version

# The harness's own formatting (it is outside the workspace that `cargo fmt --all` sees).
cargo fmt --manifest-path fuzz/Cargo.toml -- --check

# Every [[bin]] of fuzz/Cargo.toml is a target.
mapfile -t all < <(awk '/^\[\[bin\]\]/{b=1; next} b && /^name *=/{gsub(/[" ]/,"",$0); sub(/^name=/,"",$0); print; b=0}' fuzz/Cargo.toml)
if [ "$#" -gt 0 ]; then targets=("$@"); else targets=("${all[@]}"); fi
[ "${#targets[@]}" -gt 0 ] || { echo "no fuzz targets listed in fuzz/Cargo.toml" >&2; exit 1; }

start=$(date +%s)
cd fuzz
cargo fuzz build --sanitizer "$sanitizer" --target-dir "$target_dir"
built=$(date +%s)
echo "fuzz targets built in $((built - start)) s"

summary=()
for t in "${targets[@]}"; do
  corpus="$work/corpus/$t"
  artifacts="$work/artifacts/$t/"
  mkdir -p "$corpus" "$artifacts"
  args=(-max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$artifacts")
  if [ -f "dicts/$t.dict" ]; then
    args+=(-dict="dicts/$t.dict")
  elif [[ " fingerprint derive policy " == *" $t "* ]]; then
    args+=(-dict=dicts/json.dict)
  fi
  seeds=()
  [ -d "corpus/$t" ] && seeds+=("corpus/$t")
  log="$work/$t.log"
  echo "--- $t (${seconds} s)"
  if ! cargo fuzz run --sanitizer "$sanitizer" --target-dir "$target_dir" "$t" "$corpus" "${seeds[@]}" -- "${args[@]}" >"$log" 2>&1; then
    tail -n 60 "$log"
    crash=$(ls -t "$artifacts" 2>/dev/null | head -n 1 || true)
    echo "FAIL: fuzz target $t failed (a crash, or see the output above)" >&2
    if [ -n "$crash" ]; then
      echo "reproducer: $artifacts$crash" >&2
      echo "rerun it:   (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run --sanitizer $sanitizer --target-dir $target_dir $t $artifacts$crash)" >&2
    fi
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | tr -d 'cov: ')
  summary+=("$(printf '%-16s %10s runs %8s exec/s  cov %s' "$t" "${runs:-?}" "${rate:-?}" "${cov:-?}")")
  echo "${summary[-1]}"
done

end=$(date +%s)
echo
echo "fuzz: ${#targets[@]} targets, ${seconds} s each, 0 crashes; build $((built - start)) s, total $((end - start)) s"
printf '%s\n' "${summary[@]}"
