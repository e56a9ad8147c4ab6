#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (in BUILD_DIR/fuzz) and fuzzes each for SECONDS from the
# checked-in corpus (copied, so the source tree is not modified). FUZZ_TARGETS picks targets
# (default: safetensors npy api; fuzz_api compiles attend's runtime with ASan, so it is the slow one). A crash fails the test and leaves
# the input in BUILD_DIR/fuzz/artifacts: add it to tests/fuzz/corpus/<target>/ as a regression.
# Exit 77 (skipped) when clang++ with libFuzzer is not installed.
set -euo pipefail
src="$1"
build="$2/fuzz"
seconds="${3:-20}"
command -v clang++ >/dev/null || { echo "SKIPPED: clang++ not installed"; exit 77; }
mkdir -p "$build"
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long){return 0;}' > "$2/fuzz_probe.cpp"
clang++ -fsanitize=fuzzer "$2/fuzz_probe.cpp" -o "$2/fuzz_probe" 2>/dev/null || {
  echo "SKIPPED: clang++ cannot link libFuzzer (install libclang-rt-dev)"
  exit 77
}
cmake -S "$src/tests/fuzz" -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" >/dev/null
targets="${FUZZ_TARGETS:-safetensors npy api}"
for t in $targets; do cmake --build "$build" -j "$(nproc)" --target "fuzz_$t" >/dev/null; done
mkdir -p "$build/artifacts"
for t in $targets; do
  work="$build/corpus_$t"
  rm -rf "$work" && mkdir -p "$work" && cp "$src/tests/fuzz/corpus/$t/"* "$work/"
  echo "fuzzing $t for ${seconds}s"
  log="$build/fuzz_$t.log"
  # The whole log on a crash (the report and its input); the closing statistics otherwise.
  "$build/fuzz_$t" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=4096 \
    -artifact_prefix="$build/artifacts/${t}_" -print_final_stats=1 "$work" >"$log" 2>&1 || { cat "$log"; exit 1; }
  tail -n 12 "$log"
done
