// scaled_dot_product_attention and its workspace query: the public types become an AttentionCall,
// validated and built into a job in attention_call.cpp like every other entry point.
#include <attend/error.hpp>
#include <attend/sdpa.hpp>
#include <cmath>
#include <string>

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

std::vector<float> alibi_slopes(int64_t heads) {
  if (heads <= 0)
    throw Error(ErrorCode::invalid_argument, "alibi_slopes: heads must be > 0, got " + std::to_string(heads));
  int64_t n = 1;
  while (n * 2 <= heads) n *= 2;
  std::vector<float> slopes;
  slopes.reserve(static_cast<size_t>(heads));
  const double nd = static_cast<double>(n);
  for (int64_t h = 0; h < n; ++h)
    slopes.push_back(static_cast<float>(std::exp2(-8.0 * static_cast<double>(h + 1) / nd)));
  for (int64_t k = 0; n + k < heads; ++k)
    slopes.push_back(static_cast<float>(std::exp2(-4.0 * static_cast<double>(2 * k + 1) / nd)));
  return slopes;
}

}  // namespace attend
