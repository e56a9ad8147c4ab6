#!/usr/bin/python3
"""The scaling picture of docs/scaling.md, from one attend-bench run.

Reads the run's per-core decode bandwidth (layer/attend/L3, L4: bytes streamed per second over the
bench's threads), per-core prefill GFLOP/s (layer/attend/L1), and the measured two-rank run
(layer/attend-tp2/L1..L4, with its all-reduce share), and predicts the attention tokens/s of a
Llama-3-8B-shaped model (32 layers of d_model 4096, 32 query heads, 8 kv heads of 128, f32 weights
and KV cache) on 1, 2, 4 and 8 ranks of `--cores` cores each, the all-reduce (d_model floats per
token per layer) over shared memory and over a 25 GB/s network. Prints Markdown.

usage: scaling_model.py RUN.json [--cores C] [--net-gbps 25] [--net-latency-us 10]
"""
import argparse
import json
import math
import re


def load(path):
    text = open(path).read()
    text = re.sub(r"\b-?(nan|NaN|inf|Infinity)\b", "null", text)
    d = json.loads(text)
    entries = {}
    for b in d["benchmarks"]:
        agg = b.get("aggregate_name")
        if agg not in (None, "median") or b.get("error_occurred"):
            continue
        name = "/".join(p for p in b["run_name"].split("/") if p not in ("manual_time",) and ":" not in p)
        unit = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]
        entries.setdefault(name, {"seconds": b["real_time"] * unit, **{k: v for k, v in b.items()
                                                                        if isinstance(v, (int, float))}})
    return d.get("context", {}), entries


# Llama-3-8B attention, per layer.
D, HQ, HKV, HD, LAYERS = 4096, 32, 8, 128, 32
W_BYTES = 4 * D * (HQ * HD + 2 * HKV * HD) + 4 * HQ * HD * D  # f32 projections


def kv_bytes(batch, context):
    return 2 * 4 * batch * HKV * context * HD


def decode_step_s(ranks, cores, bw_core, batch, context, allreduce):
    """One decode step of one layer: each rank streams its 1/ranks of the weights and K/V."""
    compute = (W_BYTES + kv_bytes(batch, context)) / ranks / (bw_core * cores)
    return compute, allreduce(ranks, 4 * D * batch) if ranks > 1 else 0.0


def prefill_s(ranks, cores, gflops_core, tokens, allreduce):
    flops = 2 * tokens * (D * (HQ * HD + 2 * HKV * HD) + HQ * HD * D) + 4 * HQ * HD * tokens * (tokens + 1) / 2
    compute = flops / ranks / (gflops_core * 1e9 * cores)
    return compute, allreduce(ranks, 4 * D * tokens) if ranks > 1 else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--cores", type=int, default=1, help="cores per rank (the measured two-rank run: 1)")
    ap.add_argument("--net-gbps", type=float, default=25.0)
    ap.add_argument("--net-latency-us", type=float, default=10.0)
    a = ap.parse_args()
    ctx, e = load(a.run)
    threads = int(float(ctx.get("threads", ctx.get("num_cpus", 1))))
    bw_core = min(e["layer/attend/L3"]["bytes_per_second"], e["layer/attend/L4"]["bytes_per_second"]) / threads
    gf_core = e["layer/attend/L1"]["FLOPS"] / 1e9 / threads
    read_core = max(v["bytes_per_second"] for k, v in e.items() if k.startswith("stream/read/")) / threads
    # Shared-memory all-reduce: each rank sums its 1/R slice of the R partial vectors (reads R
    # slices, writes one) at the per-core read bandwidth, plus a synchronisation cost, measured as
    # the two-rank decode steps' all-reduce time (the message there is a few KiB: nearly all sync).
    tp = {s: e.get(f"layer/attend-tp2/{s}") for s in ("L1", "L2", "L3", "L4")}
    sync_s = 0.0
    if tp["L3"]:
        sync_s = tp["L3"]["seconds"] * tp["L3"].get("allreduce_pct", 0) / 100 - 2 * 4 * D / read_core
        sync_s = max(sync_s, 0.0)

    def shm(ranks, msg):
        return msg * (ranks + 1) / ranks / (read_core * a.cores) + sync_s * math.log2(ranks)

    def net(ranks, msg):  # ring all-reduce
        return 2 * (ranks - 1) / ranks * msg / (a.net_gbps * 1e9) + 2 * (ranks - 1) * a.net_latency_us * 1e-6

    print(f"Inputs ({a.run}; {ctx.get('cpu_model', '?')}, {threads} threads): decode bandwidth "
          f"{bw_core / 1e9:.1f} GB/s per core (layer/attend L3/L4), prefill {gf_core:.0f} GFLOP/s per core "
          f"(layer/attend L1), plain read {read_core / 1e9:.1f} GB/s per core, shared-memory all-reduce "
          f"synchronisation {sync_s * 1e6:.1f} µs per step (layer/attend-tp2 L3); network {a.net_gbps:g} GB/s, "
          f"{a.net_latency_us:g} µs per message. Ranks of {a.cores} core(s).\n")
    for title, kind, args in (
            ("Decode, batch 1, 4096-token context (L3's shape)", "decode", (1, 4096)),
            ("Decode, batch 8, 2048-token context (L4's shape)", "decode", (8, 2048)),
            ("Prefill, one 512-token prompt (L1's shape)", "prefill", (512,))):
        print(f"**{title}** — attention of all {LAYERS} layers, tokens/s (all-reduce share of the step)\n")
        print("| ranks | compute / layer | shared memory | 25 GB/s network |")
        print("|---|---|---|---|")
        for ranks in (1, 2, 4, 8):
            cells = []
            for ar in (shm, net):
                if kind == "decode":
                    c, r = decode_step_s(ranks, a.cores, bw_core, args[0], args[1], ar)
                    tokens = args[0]
                else:
                    c, r = prefill_s(ranks, a.cores, gf_core, args[0], ar)
                    tokens = args[0]
                t = LAYERS * (c + r)
                cells.append(f"{tokens / t:,.0f} ({100 * r / (c + r):.0f}%)")
            print(f"| {ranks} | {1e3 * c:.3f} ms | {cells[0]} | {cells[1]} |")
        # The crossover: the fewest ranks at which the all-reduce takes as long as the compute.
        notes = []
        for name, ar in (("shared memory", shm), ("the network", net)):
            cross = None
            for ranks in range(2, 1025):
                c, r = (decode_step_s(ranks, a.cores, bw_core, args[0], args[1], ar) if kind == "decode"
                        else prefill_s(ranks, a.cores, gf_core, args[0], ar))
                if r >= c:
                    cross = ranks
                    break
            notes.append(f"over {name} at {cross} ranks" if cross else f"not within 1024 ranks over {name}")
        print(f"All-reduce ≥ compute: {'; '.join(notes)}.\n")
    if any(tp.values()):
        print("**Checked against this machine's two-rank run** (layer/attend-tp2, one core per rank, against "
              "layer/attend on both cores: the model predicts equal times plus the all-reduce)\n")
        print("| shape | layer/attend ms | tp2 ms (measured) | tp2 ms (model) | all-reduce share (measured) |")
        print("|---|---|---|---|---|")
        for s in ("L1", "L2", "L3", "L4"):
            if not tp[s] or f"layer/attend/{s}" not in e:
                continue
            whole = e[f"layer/attend/{s}"]["seconds"]
            msg = {"L1": 512, "L2": 2048, "L3": 1, "L4": 8}[s] * 4 * (4096 if s != "L2" else 1024)
            model = whole + shm(2, msg)
            print(f"| {s} | {1e3 * whole:.3f} | {1e3 * tp[s]['seconds']:.3f} | {1e3 * model:.3f} | "
                  f"{tp[s].get('allreduce_pct', 0):.1f}% |")
        print()


main()
