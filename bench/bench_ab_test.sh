#!/usr/bin/env bash
# tools/bench_ab.py against the real attend-bench: two variants alternated over two rounds of one
# decode entry (its paired share, milliseconds and the ratio to the first variant; the JSON for a
# fleet), then the failures it must report rather than print a table for: a bench process that
# fails or writes no results, a filter that matches nothing, a malformed variant, two variants of
# one name.
# usage: bench_ab_test.sh ATTEND_BENCH SOURCE_DIR
set -euo pipefail
bench="$1"
ab="$2/tools/bench_ab.py"
command -v python3 >/dev/null || { echo "SKIPPED: python3 not installed"; exit 77; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
quick=(--bench "$bench" --rounds 2 --bench-arg=--benchmark_repetitions=2 --bench-arg=--benchmark_min_time=0.001)

python3 "$ab" "${quick[@]}" --filter '^cache/attend-f32/D2/' --json "$work/ab.json" \
  base lines:ATTEND_DECODE_L2_PAGES=0 >"$work/table.txt" 2>"$work/err.txt" ||
  { echo "bench_ab failed:"; cat "$work/err.txt"; exit 1; }
cat "$work/table.txt"
grep -q '^cache/attend-f32/D2$' "$work/table.txt" || { echo "no entry line"; exit 1; }
grep -Eq '^  base +[0-9.]+% [0-9.]+ +[0-9.]+% [0-9.]+ +\| median [0-9.]+ ms [0-9.]+%$' "$work/table.txt" ||
  { echo "the first variant's row lacks two rounds of share and ms, or its medians"; exit 1; }
grep -Eq "^  lines .*\| median [0-9.]+ ms [0-9.]+%, [0-9.]+x base's ms$" "$work/table.txt" ||
  { echo "the second variant's row lacks its ratio to the first"; exit 1; }
python3 - "$work/ab.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
e = d["entries"]["cache/attend-f32/D2"]
assert [v["name"] for v in d["variants"]] == ["base", "lines"], d["variants"]
assert d["variants"][1]["env"] == {"ATTEND_DECODE_L2_PAGES": "0"}, d["variants"][1]
for name in ("base", "lines"):
    assert len(e[name]["ms"]) == 2 and all(ms > 0 for ms in e[name]["ms"]), e[name]
    assert len(e[name]["paired_pct"]) == 2 and e[name]["median_paired_pct"] > 0, e[name]
PY

expect_status() {  # expect_status CODE WHAT ARGS...: bench_ab exits CODE with a message on stderr
  local code="$1" what="$2"
  shift 2
  set +e
  python3 "$ab" "$@" >"$work/out.txt" 2>"$work/err.txt"
  local got=$?
  set -e
  [[ $got == "$code" && -s "$work/err.txt" ]] || { echo "$what: exit $got (wanted $code)"; cat "$work/out.txt" "$work/err.txt"; exit 1; }
  [[ ! -s "$work/out.txt" ]] || { echo "$what printed a table"; cat "$work/out.txt"; exit 1; }
}
expect_status 1 "a failing bench process" --bench /bin/false --filter x base
expect_status 1 "a bench process that writes no results" --bench /bin/true --filter x base
expect_status 1 "a filter matching nothing" "${quick[@]}" --filter '^no/such/entry/' base
expect_status 2 "a malformed variant" --bench "$bench" --filter x 'base:NOVALUE'
expect_status 2 "two variants of one name" --bench "$bench" --filter x base base:A=1
echo "bench_ab: the table, the JSON and five failures as documented"
