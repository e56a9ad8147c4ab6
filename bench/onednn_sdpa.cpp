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
    dnnl::primitive_attr mm_attr;  // P·V
    mm_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (bf16_matmuls) {
      qk_attr.set_fpmath_mode(dnnl::fpmath_mode::bf16);
      mm_attr.set_fpmath_mode(dnnl::fpmath_mode::bf16);
    }
    auto qk_pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(q_md, kt_md, s_md), qk_attr, eng);
    qk = dnnl::matmul(qk_pd);

    dnnl::primitive_attr plain;
    plain.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    auto pv_pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(s_md, v_md, o_md), mm_attr, eng);
    impl_names = std::string(qk_pd.impl_info_str()) + " / " + pv_pd.impl_info_str();
    pv = dnnl::matmul(pv_pd);

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
    qk.execute(strm,
               {{DNNL_ARG_SRC, qm}, {DNNL_ARG_WEIGHTS, km}, {DNNL_ARG_DST, scores}, {DNNL_ARG_SCRATCHPAD, scratch_qk}});
    if (s.causal)
      add_mask.execute(strm, {{DNNL_ARG_SRC_0, scores},
                              {DNNL_ARG_SRC_1, mask},
                              {DNNL_ARG_DST, scores},
                              {DNNL_ARG_SCRATCHPAD, scratch_add}});
    softmax.execute(strm, {{DNNL_ARG_SRC, scores}, {DNNL_ARG_DST, scores}, {DNNL_ARG_SCRATCHPAD, scratch_sm}});
    pv.execute(strm,
               {{DNNL_ARG_SRC, scores}, {DNNL_ARG_WEIGHTS, vm}, {DNNL_ARG_DST, om}, {DNNL_ARG_SCRATCHPAD, scratch_pv}});
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
