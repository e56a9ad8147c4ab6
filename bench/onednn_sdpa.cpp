#include "onednn_sdpa.hpp"

#include <cmath>
#include <limits>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>

namespace attend::bench {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

struct OnednnSdpa::Impl {
  SdpaShape s;
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  memory::desc q_md, kt_md, s_md, mask_md, v_md, o_md;
  dnnl::matmul qk, pv;
  dnnl::binary add_mask;
  dnnl::softmax_forward softmax;
  memory scores, mask, scratch_qk, scratch_pv, scratch_add, scratch_sm;
  size_t workspace = 0;
  std::string impl_names;
  bool bf16 = false;
  memory::desc k_md, kt16_md;  // K as [BH, Nk, D] f32 (the bf16 copy's source); Kᵀ of the copy
  memory q16, k16, v16, p16;
  dnnl::reorder to_q16, to_k16, to_v16, to_p16;

  Impl(const SdpaShape& shape, bool bf16_matmuls) : s(shape) {
    const int64_t G = s.Hq / s.Hkv, BH = s.B * s.Hkv, M = G * s.Nq;
    q_md = memory::desc({BH, M, s.D}, dt::f32, tag::abc);
    // Kᵀ as a strided view of K [BH, Nk, D]: no transpose copy.
    const int64_t hs = s.kv_head_stride > 0 ? s.kv_head_stride : s.Nk * s.D;
    kt_md = memory::desc({BH, s.D, s.Nk}, dt::f32, memory::dims{hs, 1, s.D});
    s_md = memory::desc({BH, M, s.Nk}, dt::f32, tag::abc);
    v_md = memory::desc({BH, s.Nk, s.D}, dt::f32, memory::dims{hs, s.D, 1});
    o_md = memory::desc({BH, M, s.D}, dt::f32, tag::abc);

    dnnl::primitive_attr qk_attr;
    qk_attr.set_output_scales(0, {1.0f / std::sqrt(static_cast<float>(s.D))});
    qk_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::primitive_attr plain;
    plain.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    // bf16: the matmuls read bf16 copies (dense K and V; Kᵀ a strided view of the copy).
    bf16 = bf16_matmuls;
    const dt mm = bf16 ? dt::bf16 : dt::f32;
    const int64_t mhs = bf16 ? s.Nk * s.D : hs;
    const memory::desc q_mm(q_md.dims(), mm, tag::abc), kt_mm({BH, s.D, s.Nk}, mm, memory::dims{mhs, 1, s.D}),
        v_mm({BH, s.Nk, s.D}, mm, memory::dims{mhs, s.D, 1}), p_mm(s_md.dims(), mm, tag::abc);
    auto qk_pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(q_mm, kt_mm, s_md), qk_attr, eng);
    qk = dnnl::matmul(qk_pd);
    auto pv_pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(p_mm, v_mm, o_md), plain, eng);
    pv = dnnl::matmul(pv_pd);
    impl_names = std::string(qk_pd.impl_info_str()) + " / " + pv_pd.impl_info_str();
    if (bf16) {
      k_md = memory::desc({BH, s.Nk, s.D}, dt::f32, memory::dims{hs, s.D, 1});
      kt16_md = kt_mm;
      q16 = memory(q_mm, eng);
      k16 = memory(memory::desc({BH, s.Nk, s.D}, dt::bf16, tag::abc), eng);
      v16 = memory(memory::desc({BH, s.Nk, s.D}, dt::bf16, tag::abc), eng);
      p16 = memory(p_mm, eng);
      workspace += q_mm.get_size() + 2 * k16.get_desc().get_size() + p_mm.get_size();
      to_q16 = dnnl::reorder(dnnl::reorder::primitive_desc(eng, q_md, eng, q_mm));
      to_k16 = dnnl::reorder(dnnl::reorder::primitive_desc(eng, k_md, eng, k16.get_desc()));
      to_v16 = dnnl::reorder(dnnl::reorder::primitive_desc(eng, v_md, eng, v16.get_desc()));
      to_p16 = dnnl::reorder(dnnl::reorder::primitive_desc(eng, s_md, eng, p_mm));
    }

    auto sm_pd = dnnl::softmax_forward::primitive_desc(
        dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, s_md, 2), plain, eng);
    softmax = dnnl::softmax_forward(sm_pd);

    scores = memory(s_md, eng);
    workspace += s_md.get_size();
    auto scratch = [&](const memory::desc& md) {
      workspace += md.get_size();
      return memory(md, eng);
    };
    scratch_qk = scratch(qk_pd.scratchpad_desc());
    scratch_pv = scratch(pv_pd.scratchpad_desc());
    scratch_sm = scratch(sm_pd.scratchpad_desc());

    if (s.causal) {
      // Row (g, i) of the stacked M rows sees key j iff j <= i + (Nk - Nq).
      mask_md = memory::desc({1, M, s.Nk}, dt::f32, tag::abc);
      mask = memory(mask_md, eng);
      workspace += mask_md.get_size();
      float* m = static_cast<float*>(mask.get_data_handle());
      const float ninf = -std::numeric_limits<float>::infinity();
      for (int64_t r = 0; r < M; ++r) {
        const int64_t i = r % s.Nq;
        for (int64_t j = 0; j < s.Nk; ++j) m[r * s.Nk + j] = j <= i + (s.Nk - s.Nq) ? 0.0f : ninf;
      }
      auto add_pd = dnnl::binary::primitive_desc(dnnl::binary::desc(dnnl::algorithm::binary_add, s_md, mask_md, s_md),
                                                 plain, eng);
      add_mask = dnnl::binary(add_pd);
      scratch_add = scratch(add_pd.scratchpad_desc());
    }
  }

  void run(const float* q, const float* k, const float* v, float* o) {
    memory qm(q_md, eng, const_cast<float*>(q)), km(kt_md, eng, const_cast<float*>(k)),
        vm(v_md, eng, const_cast<float*>(v)), om(o_md, eng, o);
    memory qa = qm, ka = km, va = vm;
    if (bf16) {
      memory kf(k_md, eng, const_cast<float*>(k));
      to_q16.execute(strm, qm, q16);
      to_k16.execute(strm, kf, k16);
      to_v16.execute(strm, vm, v16);
      qa = q16;
      ka = memory(kt16_md, eng, k16.get_data_handle());
      va = v16;
    }
    qk.execute(strm,
               {{DNNL_ARG_SRC, qa}, {DNNL_ARG_WEIGHTS, ka}, {DNNL_ARG_DST, scores}, {DNNL_ARG_SCRATCHPAD, scratch_qk}});
    if (s.causal)
      add_mask.execute(strm, {{DNNL_ARG_SRC_0, scores},
                              {DNNL_ARG_SRC_1, mask},
                              {DNNL_ARG_DST, scores},
                              {DNNL_ARG_SCRATCHPAD, scratch_add}});
    softmax.execute(strm, {{DNNL_ARG_SRC, scores}, {DNNL_ARG_DST, scores}, {DNNL_ARG_SCRATCHPAD, scratch_sm}});
    memory pa = scores;
    if (bf16) {
      to_p16.execute(strm, scores, p16);
      pa = p16;
    }
    pv.execute(strm,
               {{DNNL_ARG_SRC, pa}, {DNNL_ARG_WEIGHTS, va}, {DNNL_ARG_DST, om}, {DNNL_ARG_SCRATCHPAD, scratch_pv}});
    strm.wait();
  }
};

OnednnSdpa::OnednnSdpa(const SdpaShape& shape, bool bf16_matmuls)
    : impl_(std::make_unique<Impl>(shape, bf16_matmuls)) {}
std::string OnednnSdpa::matmul_impls() const { return impl_->impl_names; }
OnednnSdpa::~OnednnSdpa() = default;
void OnednnSdpa::run(const float* q, const float* k, const float* v, float* o) { impl_->run(q, k, v, o); }
size_t OnednnSdpa::workspace_bytes() const { return impl_->workspace; }

}  // namespace attend::bench
