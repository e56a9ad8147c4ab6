#!/usr/bin/python3
"""attend-run against PyTorch.

Builds torch.nn.MultiheadAttention layers (batch_first, with and without bias, causal through
attn_mask, several widths and head counts) and a Llama-style GQA layer with rotary embeddings
written in plain torch ops (Hugging Face's rotate_half convention), saves their weights as
.safetensors (written here from the format's definition, so no extra package is needed) and the
inputs as .npy, runs attend-run and compares: max abs error <= 1e-4 (f32 weights). Model families:
gpt-oss-style learned sinks with a sliding window, Gemma-2-style logit soft-capping and BLOOM-style
ALiBi, each written in plain torch ops the way those models' reference code does, through
attend-run's --window, --softcap and --alibi (sinks: the layer's "sinks" tensor), prefill and decode.

Usage: torch_interop.py /path/to/attend-run
Exit status 77 (ctest: skipped) when torch or numpy cannot be imported — reported, never passed.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"SKIPPED: PyTorch/NumPy unavailable for {sys.executable}: {e}")
    sys.exit(77)

TOL = 1e-4
torch.manual_seed(0)
torch.set_num_threads(2)


def save_safetensors(path, tensors, dtype="F32"):
    """tensors: name -> torch tensor. dtype F32, BF16 or F16 (values are rounded by torch)."""
    torch_dtype = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}[dtype]
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().to(torch_dtype).contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if dtype != "F32" else t.numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def run_attend(attend_run, args):
    r = subprocess.run([attend_run] + args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"attend-run {' '.join(args)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout.strip()


failures = []


def compare(name, got, want):
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    status = "ok" if err <= TOL and got.shape == want.shape else "FAIL"
    print(f"{status:4} {name}: max abs error {err:.3g} (shape {got.shape})")
    if status != "ok":
        failures.append(name)


def mha_case(attend_run, tmp, d, heads, bias, causal, batch, n, prefix=""):
    mha = torch.nn.MultiheadAttention(d, heads, bias=bias, batch_first=True)
    if bias:  # torch initialises biases to zero; make them count
        with torch.no_grad():
            mha.in_proj_bias.uniform_(-0.5, 0.5)
            mha.out_proj.bias.uniform_(-0.5, 0.5)
    x = torch.randn(batch, n, d)
    mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1) if causal else None
    with torch.no_grad():
        want, _ = mha(x, x, x, attn_mask=mask, need_weights=False)
    tensors = {prefix + "in_proj_weight": mha.in_proj_weight, prefix + "out_proj.weight": mha.out_proj.weight}
    if bias:
        tensors[prefix + "in_proj_bias"] = mha.in_proj_bias
        tensors[prefix + "out_proj.bias"] = mha.out_proj.bias
    w = os.path.join(tmp, "mha.safetensors")
    xi, yo = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
    save_safetensors(w, tensors)
    np.save(xi, x.numpy())
    args = ["-w", w, "-i", xi, "-o", yo, "--heads", str(heads)] + (["--causal"] if causal else [])
    if prefix:
        args += ["--prefix", prefix]
    run_attend(attend_run, args)
    compare(f"nn.MultiheadAttention d={d} heads={heads} bias={bias} causal={causal} B={batch} N={n}",
            np.load(yo), want.numpy())
    if causal:  # the same layer through the KV cache: prefill, then the last 3 tokens one by one
        run_attend(attend_run, args + ["--decode", "3"])
        compare(f"  ... --decode 3 (f32 cache)", np.load(yo), want.numpy())


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def llama_reference(x, wq, wk, wv, wo, heads, kv_heads, theta, causal):
    """Plain torch, Hugging Face Llama attention (no KV cache), computed in float64."""
    x, wq, wk, wv, wo = (t.double() for t in (x, wq, wk, wv, wo))
    b, n, d = x.shape
    hd = wq.shape[0] // heads
    q = (x @ wq.T).view(b, n, heads, hd).transpose(1, 2)
    k = (x @ wk.T).view(b, n, kv_heads, hd).transpose(1, 2)
    v = (x @ wv.T).view(b, n, kv_heads, hd).transpose(1, 2)
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    freqs = torch.outer(torch.arange(n, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    k = k.repeat_interleave(heads // kv_heads, dim=1)
    v = v.repeat_interleave(heads // kv_heads, dim=1)
    s = (q @ k.transpose(-1, -2)) / hd ** 0.5
    if causal:
        s = s.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1), float("-inf"))
    o = torch.softmax(s, dim=-1) @ v
    return (o.transpose(1, 2).reshape(b, n, heads * hd) @ wo.T).float()


def llama_case(attend_run, tmp, d, heads, kv_heads, hd, causal, dtype="F32", decode=0, cache="f32", tokens=21,
               shards=0):
    """shards > 0: attend-run --shard r/shards for every r; the partial outputs' sum is compared."""
    g = torch.Generator().manual_seed(d * 31 + heads)
    s = d ** -0.5
    wq = torch.empty(heads * hd, d).uniform_(-s, s, generator=g)
    wk = torch.empty(kv_heads * hd, d).uniform_(-s, s, generator=g)
    wv = torch.empty(kv_heads * hd, d).uniform_(-s, s, generator=g)
    wo = torch.empty(d, heads * hd).uniform_(-(heads * hd) ** -0.5, (heads * hd) ** -0.5, generator=g)
    if dtype != "F32":  # the file holds rounded weights: compare against the same rounded values
        rd = {"BF16": torch.bfloat16, "F16": torch.float16}[dtype]
        wq, wk, wv, wo = (t.to(rd).float() for t in (wq, wk, wv, wo))
    x = torch.randn(2, tokens, d, generator=g)
    theta = 10000.0 if d < 4096 else 500000.0  # (Llama 3's theta at its shape)
    want = llama_reference(x, wq, wk, wv, wo, heads, kv_heads, theta, causal)
    prefix = "model.layers.0.self_attn."
    w = os.path.join(tmp, "llama.safetensors")
    save_safetensors(w, {prefix + "q_proj.weight": wq, prefix + "k_proj.weight": wk, prefix + "v_proj.weight": wv,
                         prefix + "o_proj.weight": wo, "model.layers.1.self_attn.q_proj.weight": wq}, dtype)
    xi, yo = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
    np.save(xi, x.numpy())
    args = ["-w", w, "-i", xi, "-o", yo, "--heads", str(heads), "--prefix", prefix, "--rope-theta", str(theta)]
    args += ["--causal"] if causal else []
    if decode:
        args += ["--decode", str(decode), "--cache-dtype", cache]
    label = f"llama GQA {heads}:{kv_heads} d={d} hd={hd} rope causal={causal} weights={dtype}"
    if decode:
        label += f" --decode {decode} ({cache} cache)"
    if shards:
        got = None
        for r in range(shards):
            run_attend(attend_run, args + ["--shard", f"{r}/{shards}"])
            got = np.load(yo) if got is None else got + np.load(yo)
        label += f", sum of --shard r/{shards}"
    else:
        run_attend(attend_run, args)
        got = np.load(yo)
    if cache == "f32":
        compare(label, got, want.numpy())
    else:  # a reduced-precision cache has its own documented bound
        err = float(np.max(np.abs(got - want.numpy())))
        bound = {"bf16": 3e-2, "f16": 4e-3, "i8": 3e-2}[cache]
        scale = max(1e-3, float(np.max(np.abs(want.numpy()))))
        ok = err <= bound * scale
        print(f"{'ok' if ok else 'FAIL':4} {label}: max abs error {err:.3g} = {err / scale:.3g} of the output's "
              f"scale (bound {bound})")
        if not ok:
            failures.append(label)


def bloom_alibi_slopes(n):
    """transformers' build_alibi_tensor slopes (BLOOM)."""
    closest = 2 ** math.floor(math.log2(n))
    base = 2 ** (-(2 ** -(math.log2(closest) - 3)))
    slopes = torch.pow(torch.tensor(base, dtype=torch.float64), torch.arange(1, 1 + closest))
    if closest != n:
        extra_base = 2 ** (-(2 ** -(math.log2(2 * closest) - 3)))
        remaining = min(closest, n - closest)
        slopes = torch.cat([slopes, torch.pow(torch.tensor(extra_base, dtype=torch.float64),
                                              torch.arange(1, 1 + 2 * remaining, 2))])
    return slopes


def family_reference(x, wq, wk, wv, wo, bq, bk, bv, bo, heads, kv_heads, theta, window=0, softcap=0.0, sinks=None,
                     alibi=False):
    """Causal attention layer in float64 with the model families' score terms, as their code does:
    Gemma 2 divides the scaled scores by the cap, takes tanh and multiplies back before the mask;
    BLOOM adds slope_h * key_position (baddbmm with the alibi tensor; the per-row offset attend
    subtracts cancels in the softmax); gpt-oss adds a mask whose band below the diagonal is -inf
    (torch.tril(..., diagonal=-sliding_window)) and concatenates the sink logit as one more column,
    dropping it after the softmax."""
    x, wq, wk, wv, wo, bq, bk, bv, bo = (t.double() for t in (x, wq, wk, wv, wo, bq, bk, bv, bo))
    b, n, d = x.shape
    hd = wq.shape[0] // heads
    q = (x @ wq.T + bq).view(b, n, heads, hd).transpose(1, 2)
    k = (x @ wk.T + bk).view(b, n, kv_heads, hd).transpose(1, 2)
    v = (x @ wv.T + bv).view(b, n, kv_heads, hd).transpose(1, 2)
    if theta:
        inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        emb = torch.cat([torch.outer(torch.arange(n, dtype=torch.float64), inv_freq)] * 2, dim=-1)
        q = q * emb.cos() + rotate_half(q) * emb.sin()
        k = k * emb.cos() + rotate_half(k) * emb.sin()
    k = k.repeat_interleave(heads // kv_heads, dim=1)
    v = v.repeat_interleave(heads // kv_heads, dim=1)
    s = (q @ k.transpose(-1, -2)) * hd ** -0.5
    if softcap:
        s = torch.tanh(s / softcap) * softcap
    if alibi:
        s = s + bloom_alibi_slopes(heads).view(1, heads, 1, 1) * torch.arange(n, dtype=torch.float64).view(1, 1, 1, n)
    mask = torch.triu(torch.full((n, n), float("-inf"), dtype=torch.float64), diagonal=1)
    if window:
        mask += torch.tril(torch.full((n, n), float("-inf"), dtype=torch.float64), diagonal=-window)
    s = s + mask
    if sinks is not None:
        s = torch.cat([s, sinks.double().view(1, heads, 1, 1).expand(b, heads, n, 1)], dim=-1)
    w = torch.softmax(s, dim=-1)
    if sinks is not None:
        w = w[..., :-1]
    o = w @ v
    return (o.transpose(1, 2).reshape(b, n, heads * hd) @ wo.T + bo).float()


def family_case(attend_run, tmp, name, heads, kv_heads, hd, theta, window=0, softcap=0.0, sinks=False, alibi=False,
                decode=0):
    d, n = 64, 40
    g = torch.Generator().manual_seed(heads * 7 + hd)
    s = 2.5 * d ** -0.5  # large enough weights that the softcap bends the scores
    wq = torch.empty(heads * hd, d).uniform_(-s, s, generator=g)
    wk = torch.empty(kv_heads * hd, d).uniform_(-s, s, generator=g)
    wv = torch.empty(kv_heads * hd, d).uniform_(-s, s, generator=g)
    wo = torch.empty(d, heads * hd).uniform_(-(heads * hd) ** -0.5, (heads * hd) ** -0.5, generator=g)
    bq, bk, bv = (torch.empty(m).uniform_(-0.5, 0.5, generator=g) for m in (heads * hd, kv_heads * hd, kv_heads * hd))
    bo = torch.empty(d).uniform_(-0.5, 0.5, generator=g)
    sk = torch.empty(heads).uniform_(-1.0, 3.0, generator=g) if sinks else None
    x = torch.randn(2, n, d, generator=g)
    want = family_reference(x, wq, wk, wv, wo, bq, bk, bv, bo, heads, kv_heads, theta, window, softcap, sk, alibi)
    # The term must matter: without it the output is measurably different.
    plain = family_reference(x, wq, wk, wv, wo, bq, bk, bv, bo, heads, kv_heads, theta)
    effect = float(torch.max(torch.abs(want - plain)))
    prefix = "model.layers.3.self_attn."
    tensors = {prefix + "q_proj.weight": wq, prefix + "k_proj.weight": wk, prefix + "v_proj.weight": wv,
               prefix + "o_proj.weight": wo, prefix + "q_proj.bias": bq, prefix + "k_proj.bias": bk,
               prefix + "v_proj.bias": bv, prefix + "o_proj.bias": bo}
    if sinks:
        tensors[prefix + "sinks"] = sk
    w = os.path.join(tmp, "family.safetensors")
    save_safetensors(w, tensors)
    xi, yo = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
    np.save(xi, x.numpy())
    args = ["-w", w, "-i", xi, "-o", yo, "--heads", str(heads), "--prefix", prefix, "--causal"]
    args += ["--rope-theta", str(theta)] if theta else []
    args += ["--window", str(window)] if window else []
    args += ["--softcap", str(softcap)] if softcap else []
    args += ["--alibi"] if alibi else []
    args += ["--decode", str(decode)] if decode else []
    run_attend(attend_run, args)
    label = f"{name}: GQA {heads}:{kv_heads} hd={hd}" + (f" --decode {decode}" if decode else "")
    if effect < 1e-2:
        print(f"FAIL {label}: the term changes the output by only {effect:.3g}: the test would not see it")
        failures.append(label)
        return
    compare(label + f" (the term moves the output by {effect:.3g})", np.load(yo), want.numpy())


def main():
    attend_run = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        mha_case(attend_run, tmp, 64, 4, True, False, 2, 9)
        mha_case(attend_run, tmp, 64, 4, False, True, 1, 17)
        mha_case(attend_run, tmp, 96, 8, True, True, 3, 33, prefix="encoder.layers.2.self_attn.")
        mha_case(attend_run, tmp, 40, 5, True, False, 1, 70)
        llama_case(attend_run, tmp, 64, 8, 2, 16, True)
        llama_case(attend_run, tmp, 128, 4, 1, 32, False)
        llama_case(attend_run, tmp, 64, 8, 2, 16, True, dtype="BF16")
        llama_case(attend_run, tmp, 64, 8, 2, 16, True, dtype="F16", decode=5)
        llama_case(attend_run, tmp, 64, 8, 2, 16, True, decode=7, cache="bf16")
        llama_case(attend_run, tmp, 64, 8, 2, 16, True, decode=7, cache="i8")
        # Tensor parallelism (issue 18): the shards' partial outputs sum to the layer's output, with the
        # kv heads split (2 shards of 8:2) and replicated (4 shards), prefill and decode.
        llama_case(attend_run, tmp, 64, 8, 2, 16, True, shards=2)
        llama_case(attend_run, tmp, 64, 8, 2, 16, True, decode=5, shards=4)
        # The attention map: a well-formed SVG with one cell per (query, key) for a small input.
        svg = os.path.join(tmp, "map.svg")
        run_attend(attend_run, ["-w", os.path.join(tmp, "llama.safetensors"), "-i", os.path.join(tmp, "x.npy"),
                                "-o", os.path.join(tmp, "y.npy"), "--heads", "8", "--prefix",
                                "model.layers.0.self_attn.", "--causal", "--attention-map", svg, "--head", "3"])
        root = ET.parse(svg).getroot()
        cells = sum(1 for e in root.iter() if e.tag.endswith("rect"))
        ok = cells >= 21 * 21
        print(f"{'ok' if ok else 'FAIL':4} attention map: {cells} rects")
        if not ok:
            failures.append("attention map")
        # Model families (issue 16), prefill and then the last tokens decoded through the cache.
        for decode in (0, 6):
            family_case(attend_run, tmp, "gpt-oss sinks + sliding window", 8, 2, 16, 150000.0, window=7, sinks=True,
                        decode=decode)
            family_case(attend_run, tmp, "Gemma-2 softcap", 8, 4, 32, 10000.0, softcap=2.0, decode=decode)
            family_case(attend_run, tmp, "BLOOM ALiBi", 12, 12, 16, None, alibi=True, decode=decode)
        # The 8-bit cache on a real-shaped layer: Llama-3-8B's attention (d_model 4096, 32 query heads,
        # 8 kv heads of 128, theta 500000), a 48-token prompt then 16 decode steps.
        llama_case(attend_run, tmp, 4096, 32, 8, 128, True, decode=16, cache="i8", tokens=64)
    if failures:
        print(f"{len(failures)} comparisons failed")
        return 1
    print("all comparisons within tolerance")
    return 0


if __name__ == "__main__":
    sys.exit(main())
