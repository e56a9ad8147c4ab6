#!/usr/bin/python3
"""attend.scaled_dot_product_attention against PyTorch's.

Every argument combination torch's CPU SDPA supports — ranks 2 to 5, L = S, L < S and L > S,
is_causal, bool and float attn_mask (full and broadcast), scale (None, a value, 0), enable_gqa,
f32/bf16/f16, torch tensors and numpy arrays, strided views (the [B, L, H, E] token-major layout read
through a transpose) and batch broadcasting — is compared with torch's own function (the public
torch.nn.functional.scaled_dot_product_attention when this torch has it; on torch < 2.0 its private
predecessor, with scale and enable_gqa applied the way torch's documentation defines them) and with
a float64 reference written from that documentation. f32: max |attend − torch| <= 1e-5 * max |torch|.
attend's own arguments (causal_alignment, window, softcap, sinks, alibi_slopes) are checked against
the float64 reference. The maximum relative errors are printed.

Exit status 77 (ctest: skipped) when torch cannot be imported.
"""
import math
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: torch/numpy unavailable for {sys.executable}: {e}")
    sys.exit(77)

import attend

torch.manual_seed(0)
torch.set_num_threads(2)
failures = []
worst = {}


def record(kind, err):
    worst[kind] = max(worst.get(kind, 0.0), err)


def check(name, ok, detail=""):
    if not ok:
        failures.append(f"{name}: {detail}")


def expand_gqa(q, k, v, enable_gqa):
    if enable_gqa and q.dim() >= 3 and k.size(-3) != q.size(-3):
        g = q.size(-3) // k.size(-3)
        k = k.repeat_interleave(g, -3)
        v = v.repeat_interleave(g, -3)
    return k, v


def torch_sdpa(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """torch's SDPA (public when available, else torch 1.13's private one with scale and GQA as defined)."""
    public = getattr(F, "scaled_dot_product_attention", None)
    if public is not None:
        kwargs = {"attn_mask": attn_mask, "is_causal": is_causal}
        if scale is not None:
            kwargs["scale"] = scale
        try:
            return public(q, k, v, enable_gqa=enable_gqa, **kwargs)
        except TypeError:  # torch 2.0 – 2.4: no enable_gqa
            k, v = expand_gqa(q, k, v, enable_gqa)
            return public(q, k, v, **kwargs)
    k, v = expand_gqa(q, k, v, enable_gqa)
    if scale is not None:  # torch 1.13 always divides by sqrt(E)
        q = q * (scale * math.sqrt(q.size(-1)))
    shape = None
    if q.dim() != 4 or k.dim() != 4:  # the private function wants (N, H, L, E)
        shape = q.shape[:-1] + (v.size(-1),)
        lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
        q = q.expand(*lead, *q.shape[-2:]).reshape(-1, 1, *q.shape[-2:])
        k = k.expand(*lead, *k.shape[-2:]).reshape(-1, 1, *k.shape[-2:])
        v = v.expand(*lead, *v.shape[-2:]).reshape(-1, 1, *v.shape[-2:])
        if attn_mask is not None:
            attn_mask = attn_mask.expand(*lead, *attn_mask.shape[-2:]).reshape(-1, 1, *attn_mask.shape[-2:])
    out, _ = F._scaled_dot_product_attention(q, k, v, attn_mask, 0.0, False, is_causal)
    return out.reshape(shape) if shape is not None else out


def reference(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, bottom_right=False,
              window=0, softcap=0.0, sinks=None, slopes=None):
    """float64, from torch's documented reference implementation, plus attend's terms.
    A row whose keys are all masked is zeros (attend's definition)."""
    q, k, v = q.double(), k.double(), v.double()
    k, v = expand_gqa(q, k, v, enable_gqa)
    L, S = q.size(-2), k.size(-2)
    s = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.size(-1)) if scale is None else scale)
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    pos = torch.arange(L, dtype=torch.float64).unsqueeze(1) + (S - L if bottom_right else 0)
    j = torch.arange(S, dtype=torch.float64).unsqueeze(0)
    if slopes is not None:
        s = s + torch.tensor(slopes, dtype=torch.float64).view(-1, 1, 1) * (j - pos)
    visible = torch.ones(L, S, dtype=torch.bool)
    if is_causal:
        visible &= j <= pos
    if window > 0:
        visible &= j > pos - window
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            visible = visible & attn_mask
        else:
            s = s + attn_mask.double()
    s = s.masked_fill(~visible, -math.inf)
    if sinks is not None:
        sk = torch.tensor(sinks, dtype=torch.float64).view(-1, 1, 1).expand(*s.shape[:-1], 1)
        s = torch.cat([s, sk], -1)
    m = s.amax(-1, keepdim=True).clamp(min=-1e300)
    p = torch.exp(s - m)
    p = p / p.sum(-1, keepdim=True).clamp(min=1e-300)
    if sinks is not None:
        p = p[..., :-1]
    any_visible = visible.expand(s.shape[:-1] + (S,)).any(-1, keepdim=True) if attn_mask is None or \
        attn_mask.dtype == torch.bool else (s[..., :S] > -math.inf).any(-1, keepdim=True)
    return torch.where(any_visible, p @ v, torch.zeros((), dtype=torch.float64))


def rel_err(got, want):
    got = torch.as_tensor(got).double()
    want = want.double()
    scale = max(want.abs().max().item(), 1e-30)
    return (got - want).abs().max().item() / scale


def bool_mask(shape):
    m = torch.rand(shape) > 0.4
    m[..., :, 0] = True  # every row sees a key (torch gives NaN for a fully masked row)
    return m


# ---- every combination torch supports, f32, torch tensors ----
cases = 0
shapes = [  # (lead dims, Hq, Hk, L, S, E, Ev)
    ((), 1, 1, 7, 7, 16, 16),  # 2-d (rank padded)
    ((3,), 4, 4, 17, 17, 32, 32),  # 3-d (N, L, E) is (heads) here
    ((2,), 4, 4, 1, 33, 64, 64),  # 4-d decode-shaped
    ((2,), 8, 2, 13, 40, 64, 48),  # GQA, Ev != E
    ((2,), 4, 1, 40, 13, 16, 16),  # L > S, MQA
    ((2, 3), 2, 2, 9, 11, 8, 8),  # 5-d
    ((1,), 2, 2, 130, 130, 64, 64),  # tile edges
]
for lead, hq, hk, L, S, E, Ev in shapes:
    for is_causal in (False, True):
        for mask_kind in ("none", "bool", "bool_bcast", "float", "float_bcast"):
            if is_causal and mask_kind != "none":
                continue  # torch rejects attn_mask with is_causal
            for scale in (None, 0.3, 0.0):
                gqa = hk != hq
                if not lead and hq != 1:
                    continue
                qs = lead + ((hq,) if lead else ()) + (L, E)
                ks = lead + ((hk,) if lead else ()) + (S, E)
                vs = lead + ((hk,) if lead else ()) + (S, Ev)
                if len(lead) == 1 and lead == (3,) and hq == 4:  # a 3-d call: (N, L, E)
                    qs, ks, vs = (3, L, E), (3, S, E), (3, S, Ev)
                q, k, v = torch.randn(qs), torch.randn(ks), torch.randn(vs)
                full = qs[:-1] + (S,)
                mask = None
                if mask_kind == "bool":
                    mask = bool_mask(full)
                elif mask_kind == "bool_bcast":
                    mask = bool_mask((L, S))
                elif mask_kind == "float":
                    mask = torch.randn(full)
                elif mask_kind == "float_bcast":
                    mask = torch.randn((1,) * (len(full) - 2) + (L, S)) if len(full) > 2 else torch.randn(L, S)
                got = attend.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale,
                                                          enable_gqa=gqa)
                want = torch_sdpa(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale, enable_gqa=gqa)
                ref = reference(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale, enable_gqa=gqa)
                name = f"shape={qs}/{ks} causal={is_causal} mask={mask_kind} scale={scale} gqa={gqa}"
                check(name + " type", isinstance(got, torch.Tensor) and got.dtype == torch.float32 and
                      tuple(got.shape) == tuple(want.shape), f"{type(got)} {getattr(got, 'shape', None)}")
                e = rel_err(got, want)
                record("f32 vs torch", e)
                record("f32 vs float64", rel_err(got, ref))
                record("torch f32 vs float64", rel_err(want, ref))
                check(name, e <= 1e-5, f"relative error {e:.3g} vs torch")
                cases += 1

# ---- numpy arrays in, numpy out; strided views; batch broadcasting ----
q, k, v = torch.randn(2, 4, 9, 32), torch.randn(2, 4, 12, 32), torch.randn(2, 4, 12, 32)
got = attend.scaled_dot_product_attention(q.numpy(), k.numpy(), v.numpy(), is_causal=True)
check("numpy type", isinstance(got, np.ndarray) and got.dtype == np.float32, str(type(got)))
e = rel_err(torch.from_numpy(got), torch_sdpa(q, k, v, is_causal=True))
record("f32 vs torch", e)
check("numpy", e <= 1e-5, f"{e:.3g}")
m = bool_mask((9, 12)).numpy()
got = attend.scaled_dot_product_attention(q.numpy(), k.numpy(), v.numpy(), attn_mask=m)
e = rel_err(torch.from_numpy(got), torch_sdpa(q, k, v, attn_mask=torch.from_numpy(m)))
check("numpy bool mask", e <= 1e-5, f"{e:.3g}")
# [B, L, H, E] storage read through a transpose (strides (L·H·E, E, H·E, 1)): no copy.
qt, kt, vt = torch.randn(2, 9, 4, 32), torch.randn(2, 12, 4, 32), torch.randn(2, 12, 4, 32)
qv, kv, vv = qt.transpose(1, 2), kt.transpose(1, 2), vt.transpose(1, 2)
got = attend.scaled_dot_product_attention(qv, kv, vv, is_causal=True)
e = rel_err(got, torch_sdpa(qv.contiguous(), kv.contiguous(), vv.contiguous(), is_causal=True))
record("f32 vs torch", e)
check("strided views", e <= 1e-5, f"{e:.3g}")
# A padded head dimension (row stride > E) and a numpy view with a step.
big = torch.randn(2, 4, 12, 40)
got = attend.scaled_dot_product_attention(q, big[..., :32], big[..., 8:40])
e = rel_err(got, torch_sdpa(q, big[..., :32].contiguous(), big[..., 8:40].contiguous()))
check("padded rows", e <= 1e-5, f"{e:.3g}")
# key/value with batch 1 broadcast over query's batch.
got = attend.scaled_dot_product_attention(q, k[:1], v[:1])
e = rel_err(got, torch_sdpa(q, k[:1].expand(2, -1, -1, -1), v[:1].expand(2, -1, -1, -1)))
check("batch broadcast", e <= 1e-5, f"{e:.3g}")

# ---- 16-bit tensors: the input's dtype out; compared on the same rounded inputs ----
for dt, tol in ((torch.bfloat16, 1e-2), (torch.float16, 2e-3)):
    q, k, v = torch.randn(2, 4, 33, 64, dtype=dt), torch.randn(2, 4, 33, 64, dtype=dt), torch.randn(2, 4, 33, 64, dtype=dt)
    for is_causal in (False, True):
        got = attend.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
        check(f"{dt} dtype", got.dtype == dt, str(got.dtype))
        ref = reference(q, k, v, is_causal=is_causal)
        e = rel_err(got, ref)
        record(f"{str(dt)[6:]} vs float64", e)
        check(f"{dt} causal={is_causal}", e <= tol, f"{e:.3g}")
    got = attend.scaled_dot_product_attention(q.float().numpy().astype(np.float16), k.float().numpy().astype(np.float16),
                                              v.float().numpy().astype(np.float16))
    check("numpy float16 out", got.dtype == np.float16, str(got.dtype))

# ---- attend's arguments against the float64 reference ----
q, k, v = torch.randn(2, 4, 20, 32), torch.randn(2, 2, 50, 32), torch.randn(2, 2, 50, 32)
sinks = [0.5, -1.0, 2.0, 0.0]
slopes = attend.alibi_slopes(4)
for kwargs in ({"causal_alignment": "bottom_right", "is_causal": True}, {"window": 7, "is_causal": True},
               {"softcap": 2.0}, {"sinks": sinks}, {"alibi_slopes": slopes, "is_causal": True},
               {"softcap": 3.0, "sinks": torch.tensor(sinks), "alibi_slopes": np.array(slopes), "window": 9,
                "is_causal": True, "causal_alignment": "bottom_right"}):
    got = attend.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kwargs)
    ref = reference(q, k, v, is_causal=kwargs.get("is_causal", False), enable_gqa=True,
                    bottom_right=kwargs.get("causal_alignment") == "bottom_right", window=kwargs.get("window", 0),
                    softcap=kwargs.get("softcap", 0.0),
                    sinks=None if "sinks" not in kwargs else [float(x) for x in kwargs["sinks"]],
                    slopes=None if "alibi_slopes" not in kwargs else [float(x) for x in kwargs["alibi_slopes"]])
    e = rel_err(got, ref)
    record("attend terms vs float64", e)
    check(f"terms {sorted(kwargs)}", e <= 1e-5, f"{e:.3g}")
# bottom_right with L > S: the first L − S rows see no key — zeros (torch's tril(S − L) gives NaN).
got = attend.scaled_dot_product_attention(torch.randn(1, 1, 6, 8), torch.randn(1, 1, 4, 8), torch.randn(1, 1, 4, 8),
                                          is_causal=True, causal_alignment="bottom_right")
check("fully masked rows are zeros", bool((got[0, 0, :2] == 0).all()) and bool(torch.isfinite(got).all()), str(got))

# ---- errors: ValueError with attend's or the binding's message ----
q = torch.randn(1, 2, 4, 8)
for name, call in (
        ("dropout", lambda: attend.scaled_dot_product_attention(q, q, q, dropout_p=0.1)),
        ("mask and causal", lambda: attend.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(4, 4) > 0,
                                                                        is_causal=True)),
        ("dtype mix", lambda: attend.scaled_dot_product_attention(q, q.double(), q)),
        ("int dtype", lambda: attend.scaled_dot_product_attention(q.int(), q.int(), q.int())),
        ("bad alignment", lambda: attend.scaled_dot_product_attention(q, q, q, causal_alignment="middle")),
        ("not an array", lambda: attend.scaled_dot_product_attention([1.0], q, q)),
        ("mask shape", lambda: attend.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(3, 4) > 0)),
        ("attend's own check", lambda: attend.scaled_dot_product_attention(q, q, q, softcap=-1.0)),
        ("sinks size", lambda: attend.scaled_dot_product_attention(q, q, q, sinks=[1.0])),
        ("last dim strided", lambda: attend.scaled_dot_product_attention(q.transpose(2, 3), q, q)),
):
    try:
        call()
        failures.append(f"error case '{name}' did not raise")
    except ValueError as e:
        check(f"error case '{name}' message", len(str(e)) > 10, str(e))
    except Exception as e:  # noqa: BLE001
        failures.append(f"error case '{name}' raised {type(e).__name__}: {e}")

print(f"{cases} torch-parity combinations; max relative errors:")
for k_, e in sorted(worst.items()):
    print(f"  {k_:28s} {e:.3g}")
if failures:
    print(f"{len(failures)} FAILED:")
    for f in failures[:40]:
        print("  " + f)
    sys.exit(1)
print("sdpa parity: all checks passed")
