#!/usr/bin/env python3
"""Alternated A/B runs of attend-bench: the way every performance change here is measured.

The machines attend is measured on are shared and their memory swings between states from one
process to the next, so two builds (or two settings) are compared by running their attend-bench
processes alternately, round after round, and reading each entry's paired figure (its share of the
plain read timed beside each decode step, or of the FMA probe beside each prefill call) next to its
milliseconds. A variant is one attend-bench binary with one environment:

    tools/bench_ab.py --rounds 3 --filter '^cache/attend-f32/D[23]/' \\
        base new:-:/tmp/new/build/bin/attend-bench lines:ATTEND_DECODE_L2_PAGES=0

Each VARIANT is NAME[:ENV[:BINARY]]: ENV is '-' (none) or K=V pairs separated by commas, BINARY
defaults to --bench. Every process runs with OMP_NUM_THREADS=--threads unless ENV sets it. The
table lists, per entry and variant, every round's paired share and median milliseconds, then the
medians over the rounds and the ratio of the variant's median milliseconds to the first variant's.
--json writes the same numbers for a fleet to collect. Exit status: 0, or 1 when a process failed
(its stderr is printed) or wrote no results, or the filter matched no entry, 2 on bad arguments.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

DEFAULT_BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "bin", "attend-bench")
# The paired figure an entry reports, by kind: decode entries a share of a plain read, prefill
# entries a share of the FMA probe (bf16 math: of the vdpbf16ps probe), both as the counters say.
PAIRED = ("stream_pct", "peak_pct")


def parse_variant(text, default_bench):
    parts = text.split(":", 2)
    name = parts[0]
    if not name:
        raise ValueError(f"variant '{text}': empty name")
    env = {}
    if len(parts) > 1 and parts[1] not in ("", "-"):
        for kv in parts[1].split(","):
            key, sep, value = kv.partition("=")
            if not sep or not key:
                raise ValueError(f"variant '{text}': '{kv}' is not K=V")
            env[key] = value
    binary = parts[2] if len(parts) > 2 and parts[2] else default_bench
    return {"name": name, "env": env, "binary": binary}


def run_once(variant, bench_filter, threads, extra, counters):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    env.update(variant["env"])
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    try:
        cmd = [variant["binary"], "--quiet", "--benchmark_filter=" + bench_filter, "--benchmark_out=" + out,
               "--benchmark_out_format=json"] + extra
        proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"variant {variant['name']}: {' '.join(cmd)} exited {proc.returncode}\n{proc.stderr}")
        try:
            with open(out) as f:
                data = json.load(f)
        except ValueError as e:
            raise RuntimeError(f"variant {variant['name']}: {variant['binary']} wrote no JSON results ({e})") from e
    finally:
        os.unlink(out)
    medians = {}
    for b in data.get("benchmarks", []):
        if b.get("aggregate_name") != "median":
            continue
        name = b["run_name"].removesuffix("/manual_time")
        paired = next((b[k] for k in PAIRED if k in b), None)
        ms = b["real_time"] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ms")]
        medians[name] = {"paired_pct": paired, "ms": ms,
                         "counters": {c: b[c] for c in counters if isinstance(b.get(c), (int, float))}}
    return medians


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("variants", nargs="+", metavar="VARIANT", help="NAME[:ENV[:BINARY]]")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of one process per variant (default 3)")
    ap.add_argument("--filter", required=True, help="attend-bench's --benchmark_filter")
    ap.add_argument("--bench", default=DEFAULT_BENCH, help="the default attend-bench binary")
    ap.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS (default 2)")
    ap.add_argument("--json", help="write the rounds and medians here")
    ap.add_argument("--bench-arg", action="append", default=[], help="an extra attend-bench argument (repeatable)")
    ap.add_argument("--counter", action="append", default=[],
                    help="another counter to list per round and median, e.g. slots_paired (repeatable)")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.threads < 1:
        ap.error("--rounds and --threads must be positive")
    try:
        variants = [parse_variant(v, args.bench) for v in args.variants]
    except ValueError as e:
        ap.error(str(e))
    if len({v["name"] for v in variants}) != len(variants):
        ap.error("variant names must differ")

    rounds = {v["name"]: [] for v in variants}
    try:
        for r in range(args.rounds):
            for v in variants:
                rounds[v["name"]].append(run_once(v, args.filter, args.threads, args.bench_arg, args.counter))
                print(f"round {r + 1}/{args.rounds}: {v['name']} done", file=sys.stderr, flush=True)
    except (RuntimeError, OSError) as e:
        print(f"bench_ab: {e}", file=sys.stderr)
        return 1

    entries = sorted({e for runs in rounds.values() for run in runs for e in run})
    if not entries:
        print(f"bench_ab: the filter '{args.filter}' matched no entry", file=sys.stderr)
        return 1
    base = variants[0]["name"]
    result = {"filter": args.filter, "rounds": args.rounds, "threads": args.threads,
              "variants": [{"name": v["name"], "env": v["env"], "binary": v["binary"]} for v in variants],
              "entries": {}}
    width = max(len(v["name"]) for v in variants)
    for e in entries:
        print(e)
        per, seen_by = {}, {}
        for v in variants:
            seen = seen_by[v["name"]] = [run[e] for run in rounds[v["name"]] if e in run]
            ms = [x["ms"] for x in seen]
            pct = [x["paired_pct"] for x in seen if x["paired_pct"] is not None]
            per[v["name"]] = {"ms": ms, "paired_pct": pct,
                              "median_ms": statistics.median(ms) if ms else None,
                              "median_paired_pct": statistics.median(pct) if pct else None, "counters": {}}
            for c in args.counter:
                values = [x["counters"][c] for x in seen if c in x["counters"]]
                if values:
                    per[v["name"]]["counters"][c] = {"rounds": values, "median": statistics.median(values)}
        for v in variants:
            p = per[v["name"]]
            cells = "  ".join((f"{x['paired_pct']:5.1f}% " if x["paired_pct"] is not None else "")
                              + f"{x['ms']:.3f}" for x in seen_by[v["name"]])
            summary = ""
            if p["median_ms"] is not None:
                summary = f"| median {p['median_ms']:.3f} ms"
                if p["median_paired_pct"] is not None:
                    summary += f" {p['median_paired_pct']:.1f}%"
                b = per[base]["median_ms"]
                if v["name"] != base and b:
                    summary += f", {p['median_ms'] / b:.3f}x {base}'s ms"
            print(f"  {v['name']:<{width}}  {cells}  {summary}")
            for c, got in p["counters"].items():
                values = "  ".join(f"{x:.4g}" for x in got["rounds"])
                print(f"  {'':<{width}}  {c}: {values}  | median {got['median']:.4g}")
        result["entries"][e] = per
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
