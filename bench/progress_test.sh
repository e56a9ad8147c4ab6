#!/usr/bin/env bash
# attend-bench's progress line: on stderr when it is a terminal (a pseudo-terminal from script(1)),
# counting every run up to n of n; absent with --quiet, and absent when stderr is not a terminal.
# usage: progress_test.sh ATTEND_BENCH
set -euo pipefail
bench="$1"
command -v script >/dev/null || { echo "SKIPPED: script(1) not installed"; exit 77; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
args="--benchmark_filter=^stream/read/D2/ --benchmark_repetitions=3 --benchmark_min_time=0.001"
script -qec "$bench $args 2>&1 >/dev/null" /dev/null >"$work/tty.txt"
tr '\r' '\n' <"$work/tty.txt" >"$work/lines.txt"
grep -aq "attend-bench: run 0/3 (entry 1 of 1)" "$work/lines.txt" || { echo "no initial progress line:"; cat "$work/lines.txt"; exit 1; }
grep -aq "attend-bench: run 3/3 (entry 1 of 1)" "$work/lines.txt" || { echo "the line never reached 3/3:"; cat "$work/lines.txt"; exit 1; }
script -qec "$bench $args --quiet 2>&1 >/dev/null" /dev/null >"$work/quiet.txt"
if grep -aq "attend-bench: run" "$work/quiet.txt"; then echo "--quiet still shows progress"; exit 1; fi
"$bench" $args >/dev/null 2>"$work/pipe.txt"
if grep -aq "attend-bench: run" "$work/pipe.txt"; then echo "progress on a stderr that is not a terminal"; exit 1; fi
echo "progress: shown on a terminal (0/3 … 3/3), not with --quiet, not on a pipe"
