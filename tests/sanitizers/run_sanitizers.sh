#!/usr/bin/env bash
# Builds attend with a sanitizer and runs tests under it.
#   address: ASan + UBSan (-fno-sanitize-recover), the whole suite except the libFuzzer stage
#            (which builds its own ASan binaries), the benchmark and the decode suites' reruns
#            under other prefetch rules.
#   thread:  TSan on the concurrency tests (8 threads × 200 decode steps; the 16-thread stress
#            test). GCC's libgomp is not TSan-instrumented, so its thread handoffs would be
#            reported as races; attend is therefore built with ATTEND_OPENMP=OFF (its own loops run
#            on the calling thread) and OMP_NUM_THREADS=1 keeps oneDNN's libgomp regions on one
#            thread. What TSan then sees is exactly the concurrency attend promises: many
#            application threads sharing one layer (primitive cache, context workspaces), one
#            context, one KV cache (claims). OpenMP
#            parallelism itself is covered by the thread-count determinism tests.
# Both build at -O1 with -g1 (line tables and function names: what a report's stack shows): with
# full debug information an AVX-512 kernel object took 232 s to compile under ASan, with -g1 157 s
# (session 50).
# usage: run_sanitizers.sh SOURCE_DIR address|thread
set -euo pipefail
src="$1"
kind="$2"
build="$src/build-$kind"
jobs="$(nproc 2>/dev/null || echo 2)"
case "$kind" in
  address)
    # (The Python module is left out: python3 itself would need the ASan runtime preloaded.)
    cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTEND_SANITIZE=address -DATTEND_BUILD_BENCH=OFF \
      -DATTEND_BUILD_PYTHON=OFF \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" >/dev/null
    cmake --build "$build" -j "$jobs" >/dev/null
    # oneDNN and libgomp keep process-lifetime allocations; leaks inside attend are still reported.
    export LSAN_OPTIONS="suppressions=$src/tests/sanitizers/lsan.supp:print_suppressions=0"
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    log="$build/ctest.log"
    # The decode suites again under other request rules (decode_tuning_*, decode_l2_ahead_*) differ
    # from their plain runs in prefetch instructions only, which ASan does not check: left out here.
    # So is Context.ReleaseAfterLongPrefillReturnsTheMemory: an 8192-token prefill over the kernels
    # and workspace paths the shorter layer and context tests run, whose point is the process's
    # resident memory after a release. At -O1 under ASan it ran 237 s on one of the two jobs; the
    # tests took 729 s with it and 622 s without (session 49).
    ctest --test-dir "$build" -j "$jobs" \
      -E 'fuzz_libfuzzer|^decode_(tuning|l2_ahead)_[a-z0-9_]+_attend_|^Context\.ReleaseAfterLongPrefillReturnsTheMemory$' \
      --output-on-failure >"$log" 2>&1 || { cat "$log"; exit 1; }
    tail -n 4 "$log"
    ;;
  thread)
    cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTEND_SANITIZE=thread -DATTEND_OPENMP=OFF \
      -DATTEND_BUILD_BENCH=OFF -DATTEND_BUILD_TOOLS=OFF -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" >/dev/null
    cmake --build "$build" -j "$jobs" --target attend_mha_test attend_stress_test attend_context_test \
      attend_cached_attention_invalid_test attend_paged_attention_test attend_dispatch_test >/dev/null
    export OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
    "$build/bin/attend_mha_test" --gtest_filter='Concurrency.*'
    "$build/bin/attend_stress_test"
    # One context shared by threads (its workspace pool) and one cache modified by several (claims).
    "$build/bin/attend_context_test" --gtest_filter='Context.SharedByConcurrentCallers'
    "$build/bin/attend_cached_attention_invalid_test" --gtest_filter='*Concurrent*'
    # A paged cache: disjoint sequences (forks of one prefix) from several threads, one sequence from two.
    "$build/bin/attend_paged_attention_test" --gtest_filter='PagedKVCacheThreads.*'
    # The decode request kind's chooser (request_kind.hpp), alone and behind concurrent decode calls.
    "$build/bin/attend_dispatch_test" --gtest_filter='RequestKindChooser.ConcurrentCallsAreSafe'
    ATTEND_DECODE_ADAPT=1 "$build/bin/attend_cached_attention_invalid_test" --gtest_filter='*Concurrent*'
    ;;
  *) echo "usage: $0 SOURCE_DIR address|thread" >&2; exit 2 ;;
esac
