// scaled_dot_product_attention and its workspace query: the public types become an AttentionCall,
// validated and built into a job in attention_call.cpp like every other entry point.
#include <attend/sdpa.hpp>

#include "../dispatch/registry.hpp"
#include "attention_call.hpp"

namespace attend {
size_t sdpa_workspace_bytes(const TensorView& q, const TensorView& k, const TensorView& v, const SdpaOptions& opt) {
  // Validated as the call itself would be, except for the output it is not given.
  detail::AttentionCall call = detail::call_from_options("sdpa_workspace_bytes", q, k, v, TensorView(), opt);
  call.check_output = false;
  const detail::Checked s = detail::validate(call);
  const kernels::KernelTable& table = dispatch::kernel_table_for(opt.isa, opt.fpmath);
  const detail::Lease lease(opt.context, opt.num_threads);
  detail::Needs needs;
  detail::add_needs(table, s, lease.threads(), needs);
  return detail::bytes_of(needs);
}

void scaled_dot_product_attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& o,
                                  const SdpaOptions& opt) {
  detail::run(detail::call_from_options("sdpa", q, k, v, o, opt));
}

}  // namespace attend
