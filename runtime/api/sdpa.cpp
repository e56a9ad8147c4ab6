// scaled_dot_product_attention and its workspace query: the public types become an AttentionCall,
// validated and built into a job in attention_call.cpp like every other entry point.
#include <attend/sdpa.hpp>

#include "../dispatch/registry.hpp"
#include "attention_call.hpp"

namespace attend {
namespace {

detail::AttentionCall sdpa_call(const char* who, const TensorView& q, const TensorView& k, const TensorView& v,
                                const TensorView& o, const SdpaOptions& opt) {
  detail::AttentionCall c;
  c.who = who;
  c.q = q;
  c.k = k;
  c.v = v;
  c.o = o;
  c.scale = opt.scale;
  c.causal = opt.causal;
  c.window = opt.window;
  c.kv_lens = opt.kv_lens;
  c.bias = opt.bias;
  c.num_threads = opt.num_threads;
  c.isa = opt.isa;
  c.context = opt.context;
  return c;
}

}  // namespace

size_t sdpa_workspace_bytes(const TensorView& q, const TensorView& k, const TensorView& v, const SdpaOptions& opt) {
  // Validated as the call itself would be, except for the output it is not given.
  detail::AttentionCall call = sdpa_call("sdpa_workspace_bytes", q, k, v, TensorView(), opt);
  call.check_output = false;
  const detail::Checked s = detail::validate(call);
  const kernels::KernelTable& table = dispatch::kernel_table_for(opt.isa);
  const detail::Lease lease(opt.context, opt.num_threads);
  detail::Needs needs;
  detail::add_needs(table, s, lease.threads(), needs);
  return detail::bytes_of(needs);
}

void scaled_dot_product_attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                                  const SdpaOptions& opt) {
  detail::run(sdpa_call("sdpa", q, k, v, o, opt));
}

}  // namespace attend
