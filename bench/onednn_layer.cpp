#include "onednn_layer.hpp"

#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "bench_common.hpp"
#include "onednn_sdpa.hpp"

namespace attend::bench {

using dnnl::memory;
using dt = memory::data_type;
using tag = memory::format_tag;

struct OnednnLayer::Impl {
  LayerShape s;
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  int64_t C = 0, M = 0;
  dnnl::matmul qkv_mm, o_mm;
  KvBuffer w_qkv_pages, w_o_pages;  // the packed weights' storage: 2 MiB pages, as attend's
  memory w_qkv, w_o, qkv, q_dense, k_dense, v_dense, o_dense, attn;
  dnnl::reorder q_tr, k_tr, v_tr, o_tr;
  memory q_view, k_view, v_view, o_view;
  std::unique_ptr<OnednnSdpa> sdpa;

  dnnl::matmul make_mm(int64_t m, int64_t k, int64_t n, const float* w, KvBuffer& pages, memory& packed) {
    memory::desc src({m, k}, dt::f32, tag::ab), dst({m, n}, dt::f32, tag::ab), wany({k, n}, dt::f32, tag::any);
    auto pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wany, dst), eng);
    memory user({{k, n}, dt::f32, tag::ab}, eng, const_cast<float*>(w));
    pages.resize((pd.weights_desc().get_size() + sizeof(float) - 1) / sizeof(float));
    packed = memory(pd.weights_desc(), eng, pages.data());
    dnnl::reorder(user, packed).execute(strm, user, packed);
    return dnnl::matmul(pd);
  }

  Impl(const LayerShape& shape, const float* wqkv, const float* wo) : s(shape) {
    C = (s.hq + 2 * s.hkv) * s.hd;
    M = s.B * s.N;
    qkv_mm = make_mm(M, s.dm, C, wqkv, w_qkv_pages, w_qkv);
    o_mm = make_mm(M, s.hq * s.hd, s.dm, wo, w_o_pages, w_o);
    qkv = memory({{M, C}, dt::f32, tag::ab}, eng);
    attn = memory({{M, s.hq * s.hd}, dt::f32, tag::ab}, eng);
    float* base = static_cast<float*>(qkv.get_data_handle());
    // Views of the projection output as [B, H, N, D] (strides into the [B·N, C] rows).
    auto view = [&](int64_t heads, int64_t offset) {
      return memory({{s.B, heads, s.N, s.hd}, dt::f32, memory::dims{s.N * C, s.hd, C, 1}}, eng, base + offset);
    };
    q_view = view(s.hq, 0);
    q_dense = memory({{s.B, s.hq, s.N, s.hd}, dt::f32, tag::abcd}, eng);
    q_tr = dnnl::reorder(q_view, q_dense);
    o_dense = memory({{s.B, s.hq, s.N, s.hd}, dt::f32, tag::abcd}, eng);
    o_view = memory({{s.B, s.hq, s.N, s.hd}, dt::f32, memory::dims{s.N * s.hq * s.hd, s.hd, s.hq * s.hd, 1}}, eng,
                    attn.get_data_handle());
    o_tr = dnnl::reorder(o_dense, o_view);
    if (s.cache_len == 0) {
      k_view = view(s.hkv, s.hq * s.hd);
      v_view = view(s.hkv, (s.hq + s.hkv) * s.hd);
      k_dense = memory({{s.B, s.hkv, s.N, s.hd}, dt::f32, tag::abcd}, eng);
      v_dense = memory({{s.B, s.hkv, s.N, s.hd}, dt::f32, tag::abcd}, eng);
      k_tr = dnnl::reorder(k_view, k_dense);
      v_tr = dnnl::reorder(v_view, v_dense);
      sdpa = std::make_unique<OnednnSdpa>(SdpaShape{s.B, s.hq, s.hkv, s.N, s.N, s.hd, true});
    } else {
      sdpa = std::make_unique<OnednnSdpa>(SdpaShape{s.B, s.hq, s.hkv, 1, s.cache_len, s.hd, false});
    }
  }

  void run(const float* x, float* y, float* kc, float* vc) {
    memory xm({{M, s.dm}, dt::f32, tag::ab}, eng, const_cast<float*>(x));
    memory ym({{M, s.dm}, dt::f32, tag::ab}, eng, y);
    qkv_mm.execute(strm, {{DNNL_ARG_SRC, xm}, {DNNL_ARG_WEIGHTS, w_qkv}, {DNNL_ARG_DST, qkv}});
    q_tr.execute(strm, q_view, q_dense);
    if (s.cache_len == 0) {
      k_tr.execute(strm, k_view, k_dense);
      v_tr.execute(strm, v_view, v_dense);
      strm.wait();
      sdpa->run(static_cast<float*>(q_dense.get_data_handle()), static_cast<float*>(k_dense.get_data_handle()),
                static_cast<float*>(v_dense.get_data_handle()), static_cast<float*>(o_dense.get_data_handle()));
    } else {
      strm.wait();
      const float* rows = static_cast<const float*>(qkv.get_data_handle());
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.hkv; ++h) {
          const size_t at = static_cast<size_t>(((b * s.hkv + h) * s.cache_len + s.cache_len - 1) * s.hd);
          std::memcpy(kc + at, rows + b * C + (s.hq + h) * s.hd, sizeof(float) * s.hd);
          std::memcpy(vc + at, rows + b * C + (s.hq + s.hkv + h) * s.hd, sizeof(float) * s.hd);
        }
      sdpa->run(static_cast<float*>(q_dense.get_data_handle()), kc, vc, static_cast<float*>(o_dense.get_data_handle()));
    }
    o_tr.execute(strm, o_dense, o_view);
    o_mm.execute(strm, {{DNNL_ARG_SRC, attn}, {DNNL_ARG_WEIGHTS, w_o}, {DNNL_ARG_DST, ym}});
    strm.wait();
  }
};

OnednnLayer::OnednnLayer(const LayerShape& s, const float* w_qkv, const float* w_o)
    : impl_(std::make_unique<Impl>(s, w_qkv, w_o)) {}
OnednnLayer::~OnednnLayer() = default;
void OnednnLayer::run(const float* x, float* y, float* k_cache, float* v_cache) { impl_->run(x, y, k_cache, v_cache); }
std::vector<std::pair<const void*, size_t>> OnednnLayer::weight_ranges() const {
  return {{impl_->w_qkv.get_data_handle(), impl_->w_qkv.get_desc().get_size()},
          {impl_->w_o.get_data_handle(), impl_->w_o.get_desc().get_size()}};
}

}  // namespace attend::bench
