// A minimal consumer: one attention call, checked for a finite result.
#include <attend/attend.hpp>
#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  std::vector<float> q(1 * 2 * 5 * 8, 0.25f), k(1 * 2 * 7 * 8, 0.5f), v(k.size(), 1.0f), o(q.size());
  attend::SdpaOptions opt;
  opt.causal = true;
  attend::scaled_dot_product_attention(attend::TensorView::dense(static_cast<const float*>(q.data()), {1, 2, 5, 8}),
                                       attend::TensorView::dense(static_cast<const float*>(k.data()), {1, 2, 7, 8}),
                                       attend::TensorView::dense(static_cast<const float*>(v.data()), {1, 2, 7, 8}),
                                       attend::TensorView::dense(o.data(), {1, 2, 5, 8}), opt);
  for (float x : o)
    if (std::fabs(x - 1.0f) > 1e-6f) return 1;  // V is all ones: every output is 1
  std::printf("consumer: ok (attend %s, %s)\n", ATTEND_VERSION_STRING, attend::isa_name(attend::active_isa()));
  return 0;
}
