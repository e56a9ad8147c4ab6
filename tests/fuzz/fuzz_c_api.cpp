// libFuzzer target for the C API (attend/attend.h): a random sequence of calls — sdpa with random
// shapes, strides, dtypes, enums (valid or not), options and NULL pointers; both caches (create,
// append, attention, truncate, fork, keep, release, destroy) and the layer from raw buffers. The
// boundary's promise is checked: every call returns a known status; a failure leaves a message
// and the output exactly as it was; a successful sdpa matches the double-precision reference. An
// exception escaping a C function would reach a noexcept frame and abort — a crash the fuzzer
// reports. Buffers are sized exactly, so AddressSanitizer catches any access outside them.
#include <attend/attend.h>

#include <attend/attend.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "fuzz/fuzz_input.hpp"
#include "reference/reference_attention.hpp"

namespace {

using attend::fuzz::Input;

// A failed promise: says which (the traps of an optimised build share one address) and crashes.
#define fail() fail_at(__LINE__)
[[noreturn]] void fail_at(int line) {
  std::fprintf(stderr, "fuzz_c_api: check at line %d failed (last error: %s)\n", line, attend_last_error());
  __builtin_trap();
}

void check_status(attend_status s) {
  if (s < ATTEND_OK || s > ATTEND_ERROR_INTERNAL) fail();
  if (s == ATTEND_ERROR_INTERNAL || s == ATTEND_ERROR_OUT_OF_MEMORY) fail();  // bugs, not inputs
  if (s != ATTEND_OK && attend_last_error()[0] == '\0') fail();
  if (s == ATTEND_OK && attend_last_error()[0] != '\0') fail();
}

std::vector<float> values(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

attend_tensor tensor(float* data, int64_t b, int64_t h, int64_t n, int64_t d) {
  return attend_tensor_dense(data, ATTEND_F32, b, h, n, d);
}

// Stores an enum field as a C caller may: mostly a valid value, sometimes an int outside the enum
// (written as bytes: a C++ load of an out-of-range enum would itself be undefined).
template <class E>
void set_enum(E& field, Input& in, int valid) {
  const int64_t x = in.range(0, valid + 1);
  const std::underlying_type_t<E> v = static_cast<std::underlying_type_t<E>>(x == valid + 1 ? 77 : x);
  std::memcpy(&field, &v, sizeof v);
}

void fuzz_sdpa(Input& in, std::mt19937& rng) {
  const int64_t B = in.range(0, 2), Hkv = in.range(1, 3), G = in.range(1, 3), Nq = in.range(0, 12),
                Nk = in.range(0, 24), D = in.range(0, 16);
  const int64_t Hq = Hkv * G;
  auto q = values(rng, static_cast<size_t>(std::max<int64_t>(1, B * Hq * Nq * D)));
  auto k = values(rng, static_cast<size_t>(std::max<int64_t>(1, B * Hkv * Nk * D)));
  auto v = values(rng, static_cast<size_t>(std::max<int64_t>(1, B * Hkv * Nk * D)));
  std::vector<float> o(static_cast<size_t>(std::max<int64_t>(1, B * Hq * Nq * D)), 4321.0f);
  attend_tensor tq = tensor(q.data(), B, Hq, Nq, D), tk = tensor(k.data(), B, Hkv, Nk, D),
                tv = tensor(v.data(), B, Hkv, Nk, D), to = tensor(o.data(), B, Hq, Nq, D);
  const uint8_t twist = in.byte() % 8;
  if (twist == 1) set_enum(tq.dtype, in, 3);
  if (twist == 2) tk.strides[3] = in.range(0, 3);
  if (twist == 3) to.data = q.data();  // aliases q
  if (twist == 4) tv.shape[2] += 1;    // reads past v: must be rejected by shape checks
  attend_sdpa_options opt{};
  opt.causal = in.flag();
  set_enum(opt.causal_alignment, in, 1);
  opt.window = in.range(-1, 6);
  opt.softcap = in.range(0, 3) == 0 ? 3.0f : 0.0f;
  std::vector<float> sinks, slopes;
  if (in.flag()) {
    sinks = values(rng, static_cast<size_t>(Hq + (in.range(0, 7) == 0 ? 1 : 0)));
    opt.sinks = sinks.data();
    opt.sinks_count = sinks.size();
  }
  if (in.range(0, 7) == 0) opt.sinks_count = 3;  // possibly with a NULL pointer
  if (in.flag()) {
    slopes = values(rng, static_cast<size_t>(Hq));
    opt.alibi_slopes = slopes.data();
    opt.alibi_slopes_count = slopes.size();
  }
  std::vector<int64_t> lens;
  if (in.range(0, 3) == 0) {
    for (int64_t b = 0; b < B; ++b) lens.push_back(in.range(-1, Nk));
    opt.kv_lens = lens.data();
    opt.kv_lens_count = lens.size();
  }
  opt.num_threads = static_cast<int>(in.range(-1, 2));
  set_enum(opt.isa, in, 4);
  set_enum(opt.fpmath, in, 1);
  const std::vector<float> before = o;
  const bool null_q = in.range(0, 15) == 0, null_opt = in.range(0, 15) == 0;  // (sequenced: one meaning per input)
  const attend_status s = attend_sdpa(null_q ? nullptr : &tq, &tk, &tv, &to, null_opt ? nullptr : &opt);
  check_status(s);
  if (s != ATTEND_OK) {
    if (std::memcmp(before.data(), o.data(), o.size() * sizeof(float)) != 0) fail();
    return;
  }
  if (null_opt) {  // the call ran with the defaults
    opt = attend_sdpa_options{};
    sinks.clear();
    slopes.clear();
    lens.clear();
  }
  int fpmath = 0, align = 0;  // (the enum fields' bytes: they may hold any int)
  std::memcpy(&fpmath, &opt.fpmath, sizeof fpmath);
  std::memcpy(&align, &opt.causal_alignment, sizeof align);
  if (twist != 0 || fpmath != ATTEND_FPMATH_STRICT) return;  // checked against the reference: plain calls
  attend::SdpaOptions ref;
  ref.causal = opt.causal != 0;
  ref.causal_alignment =
      align == ATTEND_CAUSAL_TOP_LEFT ? attend::CausalAlignment::top_left : attend::CausalAlignment::bottom_right;
  ref.window = opt.window;
  ref.softcap = opt.softcap;
  ref.sinks = sinks;
  ref.alibi_slopes = slopes;
  ref.kv_lens = lens;
  const auto dense = [](const std::vector<float>& x, int64_t b, int64_t h, int64_t n, int64_t d) {
    return attend::TensorView::dense(x.data(), {b, h, n, d});
  };
  const std::vector<double> want = attend::testing::reference_attention(dense(q, B, Hq, Nq, D), dense(k, B, Hkv, Nk, D),
                                                                        dense(v, B, Hkv, Nk, D), ref);
  for (size_t i = 0; i < want.size(); ++i)
    if (!(std::abs(o[i] - want[i]) <= 1e-4 * (1.0 + std::abs(want[i])))) fail();
}

void fuzz_caches(Input& in, std::mt19937& rng) {
  const int64_t Hkv = in.range(1, 2), D = in.range(1, 16);
  attend_paged_kv_cache_config pc{Hkv, D, in.range(0, 6), 16 * in.range(0, 2), ATTEND_F32, 0};
  set_enum(pc.dtype, in, 3);
  attend_paged_kv_cache* pool = nullptr;
  attend_status s = attend_paged_kv_cache_create(in.range(0, 15) == 0 ? nullptr : &pc, &pool);
  check_status(s);
  if (s != ATTEND_OK) {
    if (pool) fail();
    return;
  }
  attend_kv_cache_config kc{Hkv, D, in.range(0, 2), in.range(0, 40), ATTEND_F32, 0};
  set_enum(kc.dtype, in, 3);
  attend_kv_cache* slots = nullptr;
  check_status(attend_kv_cache_create(&kc, &slots));
  std::vector<int64_t> seqs;
  for (int step = 0; step < 8 && in.n; ++step) {
    const int64_t n = in.range(0, 20);
    const int64_t Hq = Hkv * in.range(1, 2);
    auto q = values(rng, static_cast<size_t>(std::max<int64_t>(1, Hq * n * D)));
    auto k = values(rng, static_cast<size_t>(std::max<int64_t>(1, Hkv * n * D)));
    auto v = values(rng, static_cast<size_t>(std::max<int64_t>(1, Hkv * n * D)));
    std::vector<float> o(static_cast<size_t>(std::max<int64_t>(1, Hq * n * D)), 99.0f);
    attend_tensor tq = tensor(q.data(), 1, Hq, n, D), tk = tensor(k.data(), 1, Hkv, n, D),
                  tv = tensor(v.data(), 1, Hkv, n, D), to = tensor(o.data(), 1, Hq, n, D);
    const int64_t pick = seqs.empty() ? -1 : seqs[static_cast<size_t>(in.byte()) % seqs.size()];
    int64_t out = 0;
    const std::vector<float> before = o;
    switch (in.byte() % 8) {
      case 0:
        s = attend_paged_kv_cache_create_sequence(pool, &out);
        check_status(s);
        if (s == ATTEND_OK) seqs.push_back(out);
        break;
      case 1: {
        const attend_sequence_chunk c{in.flag() ? pick : in.range(-2, 9), n, nullptr};
        s = attend_paged_attention(&tq, &tk, &tv, pool, &c, in.range(0, 1), &to, nullptr);
        check_status(s);
        if (s != ATTEND_OK && std::memcmp(before.data(), o.data(), o.size() * sizeof(float)) != 0) fail();
        break;
      }
      case 2:
        s = attend_paged_kv_cache_fork(pool, pick, &out);
        check_status(s);
        if (s == ATTEND_OK) seqs.push_back(out);
        break;
      case 3: check_status(attend_paged_kv_cache_truncate(pool, pick, in.range(-1, 30))); break;
      case 4: {
        std::vector<int64_t> pos;
        for (int64_t i = in.range(0, 3); i > 0; --i) pos.push_back(in.range(-1, 30));
        // Counts match the buffers (C cannot check a longer one), except NULL with a count.
        const int64_t first = in.range(-1, 10);
        const size_t n = pos.empty() ? static_cast<size_t>(in.range(0, 1)) : pos.size();
        check_status(attend_paged_kv_cache_keep(pool, pick, first, pos.empty() ? nullptr : pos.data(), n));
        break;
      }
      case 5: check_status(attend_paged_kv_cache_release(pool, pick)); break;
      case 6: {
        const int64_t slot = in.range(-1, 2);
        s = attend_cached_attention(&tq, &tk, &tv, slots, &slot, 1, &to, nullptr);
        check_status(s);
        if (s != ATTEND_OK && std::memcmp(before.data(), o.data(), o.size() * sizeof(float)) != 0) fail();
        break;
      }
      case 7: {
        const int64_t slot = in.range(-1, 2), tokens = in.range(-1, 30);
        check_status(attend_kv_cache_truncate(slots, slot, tokens));
        break;
      }
    }
    int64_t blocks = 0;
    check_status(attend_paged_kv_cache_free_blocks(pool, &blocks));
    if (blocks < 0 || blocks > pc.num_blocks) fail();
  }
  check_status(attend_kv_cache_destroy(slots));
  check_status(attend_paged_kv_cache_destroy(pool));
}

void fuzz_layer(Input& in, std::mt19937& rng) {
  attend_layer_config cfg{};
  cfg.n_kv_heads = in.range(0, 2);
  cfg.n_heads = in.range(0, 4);
  cfg.d_model = 4 * in.range(0, 4);
  cfg.head_dim = in.range(0, 1) ? 0 : in.range(1, 8);
  cfg.bias = in.flag();
  cfg.rope = in.flag();
  cfg.causal = in.flag();
  cfg.window = in.range(-1, 4);
  set_enum(cfg.weight_dtype, in, 3);
  // Weights sized for the configuration the layer will resolve (when it is valid).
  const int64_t hd = cfg.head_dim ? cfg.head_dim : (cfg.n_heads ? cfg.d_model / cfg.n_heads : 0);
  const int64_t kvh = cfg.n_kv_heads ? cfg.n_kv_heads : cfg.n_heads;
  const auto n = [](int64_t x) { return static_cast<size_t>(std::max<int64_t>(1, x)); };
  auto wq = values(rng, n(cfg.n_heads * hd * cfg.d_model)), wk = values(rng, n(kvh * hd * cfg.d_model)),
       wv = values(rng, n(kvh * hd * cfg.d_model)), wo = values(rng, n(cfg.d_model * cfg.n_heads * hd)),
       bq = values(rng, n(cfg.n_heads * hd)), bk = values(rng, n(kvh * hd)), bv = values(rng, n(kvh * hd)),
       bo = values(rng, n(cfg.d_model));
  attend_layer_weights w{};
  w.q = wq.data();
  w.k = wk.data();
  w.v = in.range(0, 15) == 0 ? nullptr : wv.data();
  w.o = wo.data();
  if (cfg.bias) {
    w.q_bias = bq.data();
    w.k_bias = bk.data();
    w.v_bias = bv.data();
    w.o_bias = bo.data();
  }
  attend_layer* layer = nullptr;
  attend_status s = attend_layer_create(&cfg, &w, &layer);
  check_status(s);
  if (s != ATTEND_OK) return;
  const int64_t T = in.range(0, 6);
  auto x = values(rng, n(T * cfg.d_model));
  std::vector<float> y(n(T * cfg.d_model), 5.0f);
  attend_layer_options lo{};
  lo.causal = static_cast<int>(in.range(-2, 2));
  const std::vector<float> before = y;
  // (By-value enum arguments stay valid here: the C++ caller would load an invalid one itself.)
  const attend_dtype xd = in.flag() ? ATTEND_BF16 : ATTEND_F32;
  s = attend_layer_forward(layer, x.data(), xd, y.data(), ATTEND_F32, 1, T, &lo);
  check_status(s);
  if (s != ATTEND_OK && std::memcmp(before.data(), y.data(), y.size() * sizeof(float)) != 0) fail();
  attend_paged_kv_cache_config pc{kvh, hd, 4, 16, ATTEND_F32, 0};
  attend_paged_kv_cache* pool = nullptr;
  if (attend_paged_kv_cache_create(&pc, &pool) == ATTEND_OK) {
    int64_t seq = 0;
    check_status(attend_paged_kv_cache_create_sequence(pool, &seq));
    const attend_sequence_chunk c{seq, T, nullptr};
    check_status(attend_layer_forward_paged(layer, x.data(), ATTEND_F32, y.data(), ATTEND_F32, &c, 1, pool, nullptr));
    check_status(attend_paged_kv_cache_destroy(pool));
  }
  check_status(attend_layer_destroy(layer));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  std::mt19937 rng(in.byte());
  switch (in.byte() % 3) {
    case 0: fuzz_sdpa(in, rng); break;
    case 1: fuzz_caches(in, rng); break;
    case 2: fuzz_layer(in, rng); break;
  }
  return 0;
}
