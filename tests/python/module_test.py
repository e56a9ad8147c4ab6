#!/usr/bin/python3
"""The rest of `import attend`: KVCache, PagedKVCache, cached_attention, paged_attention and
MultiHeadAttention (from_safetensors and from arrays: forward, forward_cached, forward_paged) against
PyTorch (nn.MultiheadAttention, and attention written in torch ops); errors as ValueError /
RuntimeError; and several Python threads calling at once (the GIL is released), each result
bitwise equal to the same call made alone.

Exit status 77 (ctest: skipped) when torch cannot be imported.
"""
import json
import math
import os
import struct
import sys
import tempfile
import threading

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: torch/numpy unavailable for {sys.executable}: {e}")
    sys.exit(77)

import attend

torch.manual_seed(1)
torch.set_num_threads(2)
failures = []


def check(name, ok, detail=""):
    if not ok:
        failures.append(f"{name}: {detail}")


def rel_err(got, want):
    got, want = torch.as_tensor(got).double(), torch.as_tensor(want).double()
    return (got - want).abs().max().item() / max(want.abs().max().item(), 1e-30)


def causal_attention(q, k, v):
    """float64 bottom-right causal attention of [H, Nq, D] against [H, Nk, D] (GQA by repeat)."""
    q, k, v = q.double(), k.double(), v.double()
    g = q.size(0) // k.size(0)
    k, v = k.repeat_interleave(g, 0), v.repeat_interleave(g, 0)
    nq, nk = q.size(1), k.size(1)
    s = q @ k.transpose(1, 2) / math.sqrt(q.size(-1))
    j = torch.arange(nk).unsqueeze(0)
    i = torch.arange(nq).unsqueeze(1) + nk - nq
    return torch.softmax(s.masked_fill(j > i, -math.inf), -1) @ v


def save_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        raw = t.detach().float().contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---- caches: chunks then decode steps equal causal attention over the whole sequence ----
H, HKV, D, N = 4, 2, 32, 23
q, k, v = torch.randn(1, H, N, D), torch.randn(1, HKV, N, D), torch.randn(1, HKV, N, D)
want = causal_attention(q[0], k[0], v[0])
for dtype, tol in (("f32", 1e-5), ("bf16", 2e-2), ("i8", 3e-2)):
    cache = attend.KVCache(HKV, D, slots=2, capacity=64, dtype=dtype)
    pool = attend.PagedKVCache(HKV, D, num_blocks=8, block_tokens=16, dtype=dtype)
    seq = pool.create_sequence()
    outs, pouts, start = [], [], 0
    for n in (17, 1, 4, 1):
        sl = slice(start, start + n)
        outs.append(attend.cached_attention(q[:, :, sl], k[:, :, sl], v[:, :, sl], cache, [1]))
        pouts.append(attend.paged_attention(q[:, :, sl], k[:, :, sl], v[:, :, sl], pool, [(seq, n)]))
        start += n
    got, pgot = torch.cat(outs, 2)[0], torch.cat(pouts, 2)[0]
    check(f"cached_attention {dtype}", rel_err(got, want) <= tol, f"{rel_err(got, want):.3g}")
    check(f"paged_attention {dtype}", rel_err(pgot, want) <= tol, f"{rel_err(pgot, want):.3g}")
    check(f"lengths {dtype}", cache.length(1) == N and pool.length(seq) == N and cache.length(0) == 0,
          f"{cache.length(1)} {pool.length(seq)}")
    check(f"blocks {dtype}", pool.blocks(seq) == 2 and pool.free_blocks == 6, f"{pool.blocks(seq)} {pool.free_blocks}")
fork = pool.fork(seq)
check("fork shares blocks", pool.free_blocks == 6 and pool.sequences == 2, f"{pool.free_blocks}")
pool.truncate(fork, 5)
pool.keep(fork, 1, [2, 4])
check("keep", pool.length(fork) == 3, str(pool.length(fork)))
pool.release(fork)
check("blocks_needed", pool.blocks_needed([(seq, 20)]) == 1, str(pool.blocks_needed([(seq, 20)])))  # 23 + 20 tokens: a third block
# A numpy decode step and a tree chunk (two siblings under one root) through paged_attention.
qn, kn, vn = (x[:, :, :3].numpy().copy() for x in (torch.randn(1, H, 3, D), torch.randn(1, HKV, 3, D),
                                                   torch.randn(1, HKV, 3, D)))
o = attend.paged_attention(qn, kn, vn, pool, [(seq, 3, [-1, 0, 0])])
check("tree chunk numpy out", isinstance(o, np.ndarray) and o.shape == (1, H, 3, D), str(type(o)))

# ---- the layer: nn.MultiheadAttention from safetensors ----
with tempfile.TemporaryDirectory() as tmp:
    E, heads, T = 64, 4, 19
    mha = torch.nn.MultiheadAttention(E, heads, bias=True, batch_first=True)
    path = os.path.join(tmp, "mha.safetensors")
    save_safetensors(path, {"attn.in_proj_weight": mha.in_proj_weight, "attn.in_proj_bias": mha.in_proj_bias,
                            "attn.out_proj.weight": mha.out_proj.weight, "attn.out_proj.bias": mha.out_proj.bias})
    layer = attend.MultiHeadAttention.from_safetensors(path, "attn.", heads=heads, causal=True)
    check("scheme", layer.scheme == "nn.MultiheadAttention" and layer.d_model == E and layer.head_dim == 16,
          layer.scheme)
    x = torch.randn(2, T, E)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    with torch.no_grad():
        ref, _ = mha(x, x, x, attn_mask=mask, need_weights=False)
    y = layer.forward(x)
    e = rel_err(y, ref)
    check("forward vs nn.MultiheadAttention", e <= 1e-5, f"{e:.3g}")
    y_nc = layer.forward(x, causal=False)
    with torch.no_grad():
        ref_nc, _ = mha(x, x, x, need_weights=False)
    check("forward causal=False", rel_err(y_nc, ref_nc) <= 1e-5, f"{rel_err(y_nc, ref_nc):.3g}")
    # prefill + decode through both caches == forward
    cache = attend.KVCache(heads, 16, slots=2, capacity=32)
    yc = torch.cat([layer.forward_cached(x[:, :T - 2].contiguous(), cache, [0, 1]),
                    layer.forward_cached(x[:, T - 2:T - 1].contiguous(), cache, [0, 1]),
                    layer.forward_cached(x[:, T - 1:].contiguous(), cache, [0, 1])], 1)
    check("forward_cached", rel_err(yc, ref) <= 1e-5, f"{rel_err(yc, ref):.3g}")
    pool = attend.PagedKVCache(heads, 16, num_blocks=8, block_tokens=16)
    a, b = pool.create_sequence(), pool.create_sequence()
    yp = layer.forward_paged(torch.cat([x[0], x[1, :5]], 0), pool, [(a, T), (b, 5)])
    check("forward_paged", rel_err(yp[:T], ref[0]) <= 1e-5 and rel_err(yp[T:], ref[1, :5]) <= 1e-5,
          f"{rel_err(yp[:T], ref[0]):.3g}")
    # bf16 activations in and out, numpy f32 in and out
    yb = layer.forward(x.bfloat16())
    check("forward bf16", yb.dtype == torch.bfloat16 and rel_err(yb, ref) <= 3e-2, f"{rel_err(yb, ref):.3g}")
    yn = layer.forward(x.numpy())
    check("forward numpy", isinstance(yn, np.ndarray) and rel_err(torch.from_numpy(yn), ref) <= 1e-5, "")

    # From arrays, Llama-style with RoPE and GQA: forward == prefill + decode.
    wq, wk, wv, wo = torch.randn(64, 64) / 8, torch.randn(32, 64) / 8, torch.randn(32, 64) / 8, torch.randn(64, 64) / 8
    llama = attend.MultiHeadAttention(64, 4, wq, wk, wv.numpy(), wo, n_kv_heads=2, causal=True, rope_theta=10000.0)
    x1 = torch.randn(1, 12, 64)
    full = llama.forward(x1)
    cache = attend.KVCache(2, 16, slots=1, capacity=16)
    steps = [llama.forward_cached(x1[:, :10].contiguous(), cache, [0])] + [llama.forward_cached(x1[:, t:t + 1].contiguous(), cache, [0])
                                                             for t in (10, 11)]
    check("llama forward_cached == forward", rel_err(torch.cat(steps, 1), full) <= 1e-5,
          f"{rel_err(torch.cat(steps, 1), full):.3g}")

    # Tensor parallelism: two shards' partial outputs sum to the layer's (kv heads split).
    shards = [attend.MultiHeadAttention(64, 4, wq, wk, wv, wo, n_kv_heads=2, causal=True, rope_theta=10000.0,
                                        shard_rank=r, shard_count=2) for r in range(2)]
    check("shard_info", shards[1].shard_info == {"first_head": 2, "heads": 2, "first_kv_head": 1, "kv_heads": 1},
          str(shards[1].shard_info))
    parts = sum(sh.forward(x1) for sh in shards)
    check("shards sum to the layer", rel_err(parts, full) <= 1e-5, f"{rel_err(parts, full):.3g}")

    # ---- errors ----
    def expect(exc, name, call):
        try:
            call()
            failures.append(f"'{name}' did not raise")
        except exc as e:
            check(f"'{name}' message", len(str(e)) > 10, str(e))
        except Exception as e:  # noqa: BLE001
            failures.append(f"'{name}' raised {type(e).__name__}: {e}")

    expect(ValueError, "missing file", lambda: attend.MultiHeadAttention.from_safetensors(
        os.path.join(tmp, "none.safetensors"), heads=4))
    expect(ValueError, "wrong prefix", lambda: attend.MultiHeadAttention.from_safetensors(path, "nope.", heads=4))
    expect(ValueError, "x width", lambda: layer.forward(torch.randn(2, 5, 63)))
    expect(ValueError, "non-contiguous x", lambda: layer.forward(torch.randn(64, 5).t()))
    expect(ValueError, "weight size", lambda: attend.MultiHeadAttention(64, 4, wq, wk, wv, wo))  # wants 64 kv rows
    expect(ValueError, "shard count", lambda: attend.MultiHeadAttention(64, 4, wq, wk, wv, wo, n_kv_heads=2,
                                                                       shard_count=3))
    expect(ValueError, "bad dtype name", lambda: attend.KVCache(2, 16, 1, 16, dtype="f64"))
    expect(ValueError, "unknown sequence", lambda: attend.PagedKVCache(2, 16, 4).length(7))
    small = attend.PagedKVCache(2, 16, num_blocks=1, block_tokens=16)
    s0 = small.create_sequence()
    expect(RuntimeError, "pool exhausted (capacity)",
           lambda: small.append(s0, torch.randn(1, 2, 20, 16), torch.randn(1, 2, 20, 16)))
    check("failed append changed nothing", small.length(s0) == 0 and small.free_blocks == 1, "")
    expect(RuntimeError, "cache capacity", lambda: llama.forward_cached(x1, attend.KVCache(2, 16, 1, 4), [0]))

# ---- threads: several Python threads at once, each bitwise equal to the call made alone ----
inputs = [(torch.randn(1, 8, 64, 64), torch.randn(1, 2, 300, 64), torch.randn(1, 2, 300, 64)) for _ in range(6)]
alone = [attend.scaled_dot_product_attention(q_, k_, v_, enable_gqa=True, is_causal=True) for q_, k_, v_ in inputs]
results = [[None] * 5 for _ in inputs]
errors = []


def worker(i):
    try:
        for r in range(5):
            q_, k_, v_ = inputs[i]
            results[i][r] = attend.scaled_dot_product_attention(q_, k_, v_, enable_gqa=True, is_causal=True)
    except Exception as e:  # noqa: BLE001
        errors.append(repr(e))


threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(inputs))]
for t in threads:
    t.start()
for t in threads:
    t.join()
check("threads raised nothing", not errors, "; ".join(errors))
for i, rs in enumerate(results):
    for r in rs:
        check(f"thread {i} bitwise", r is not None and torch.equal(r, alone[i]), "")

# The layer from threads too (an immutable layer is shared; each thread its own cache).
caches = [attend.KVCache(2, 16, slots=1, capacity=16) for _ in range(4)]
outs = [None] * 4


def layer_worker(i):
    outs[i] = llama.forward_cached(x1, caches[i], [0])


threads = [threading.Thread(target=layer_worker, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for i in range(4):
    check(f"layer thread {i}", outs[i] is not None and rel_err(outs[i], full) <= 1e-5, "")

# The machine class, as attend-info reports it.
cls = attend.cpu_class()
check("cpu_class keys", set(cls) == {"name", "vendor", "family", "model", "avx512_bits"}, str(cls))
check("cpu_class width", cls["avx512_bits"] in (0, 256, 512), str(cls))
info = json.loads(os.popen(os.environ["ATTEND_INFO"] + " --json").read()) if os.environ.get("ATTEND_INFO") else None
if info is not None:
    check("cpu_class matches attend-info", info["cpu_class"] == cls["name"] and info["avx512_bits"] == cls["avx512_bits"],
          f"{info.get('cpu_class')} {cls}")
    # Which kernels fpmath='bf16' runs, as attend-info says it.
    check("bf16_math_amx matches attend-info", attend.bf16_math_amx() == info["fpmath_bf16"].startswith("AMX"),
          info["fpmath_bf16"])
    check("bf16_math_native matches attend-info", attend.bf16_math_native() == (not info["fpmath_bf16"].startswith("f32")),
          info["fpmath_bf16"])
    # The decode requests' rules, as attend-info says them.
    tuning = attend.decode_tuning()
    check("decode_tuning matches attend-info",
          tuning["rules"] == info["decode_tuning"] and tuning["l2_ahead_bytes"] == info["decode_l2_ahead_bytes"]
          and tuning["l2_page_starts"] == info["decode_l2_page_starts"]
          and tuning["i8_one_row_integer"] == info["decode_i8_one_row_integer"]
          and tuning["hardware_stream"] == info["decode_hardware_stream"]
          and tuning["adaptive_request_kind"] == info["decode_adaptive_request_kind"]
          and tuning["bf16_gemv_rows"] == info["bf16_gemv_rows"]
          and tuning["bf16_gemv_l2_ahead_bytes"] == info["bf16_gemv_l2_ahead_bytes"]
          and tuning["one_block_scores"] == info["decode_one_block_scores"]
          and tuning["rules_from_environment"] == info["decode_tuning_from_environment"], f"{tuning} {info}")
check("bf16_math_amx implies native", not attend.bf16_math_amx() or attend.bf16_math_native(), "")

if failures:
    print(f"{len(failures)} FAILED:")
    for f in failures[:40]:
        print("  " + f)
    sys.exit(1)
print("module: all checks passed")
