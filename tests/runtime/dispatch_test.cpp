// ISA selection: the active path is supported, every supported path is compiled, forcing works,
// and ATTEND_ISA caps the automatic choice (ctest runs this binary again with the variable set and
// ATTEND_EXPECT_ISA naming the path it must produce).
#include <gtest/gtest.h>

#include <algorithm>
#include <attend/attend.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../../runtime/dispatch/cpu_features.hpp"
#include "../../runtime/dispatch/registry.hpp"
#include "../../runtime/dispatch/request_kind.hpp"

namespace attend {
namespace {

bool contains(const std::vector<Isa>& v, Isa x) { return std::find(v.begin(), v.end(), x) != v.end(); }

TEST(Dispatch, ActiveIsSupportedAndSupportedIsCompiled) {
  const auto compiled = compiled_isas();
  const auto supported = supported_isas();
  EXPECT_TRUE(contains(supported, Isa::generic));
  for (Isa s : supported) EXPECT_TRUE(contains(compiled, s)) << isa_name(s);
  EXPECT_TRUE(contains(supported, active_isa()));
}

TEST(Dispatch, AutomaticPicksTheBestSupportedUnlessCapped) {
  if (std::getenv("ATTEND_ISA")) GTEST_SKIP() << "capped by ATTEND_ISA; see CappedByEnvironment";
  EXPECT_EQ(active_isa(), supported_isas().back());
}

// The cap resolves to the best supported path at or below it: the named path itself on a CPU that
// has it (an AVX2-only CPU capped at avx512 runs avx2).
TEST(Dispatch, CappedByEnvironment) {
  const char* expect = std::getenv("ATTEND_EXPECT_ISA");
  if (!expect) GTEST_SKIP() << "run by ctest with ATTEND_ISA and ATTEND_EXPECT_ISA set";
  Isa best = Isa::generic;
  bool named = false;
  for (Isa isa : compiled_isas()) {
    if (std::string(isa_name(isa)) == expect) named = true;
    if (contains(supported_isas(), isa) && (!named || std::string(isa_name(isa)) == expect)) best = isa;
  }
  ASSERT_TRUE(named) << expect << " is not a compiled path";
  if (std::string(isa_name(best)) != expect)
    std::printf("[ note ] %s is not supported here: the cap resolves to %s\n", expect, isa_name(best));
  EXPECT_EQ(active_isa(), best);
}

void force(Isa isa) {
  float x[16] = {};
  float y[16] = {};
  SdpaOptions opt;
  opt.isa = isa;
  scaled_dot_product_attention(TensorView::dense(static_cast<const float*>(x), {1, 1, 1, 16}),
                               TensorView::dense(static_cast<const float*>(x), {1, 1, 1, 16}),
                               TensorView::dense(static_cast<const float*>(x), {1, 1, 1, 16}),
                               TensorView::dense(y, {1, 1, 1, 16}), opt);
}

// Every path this machine supports can be forced (and is what forcing runs).
TEST(Dispatch, ForcingASupportedPathWorks) {
  for (Isa isa : supported_isas()) EXPECT_NO_THROW(force(isa)) << isa_name(isa);
}

// A value outside the enum is never silently mapped to a path.
TEST(Dispatch, ForcingAnUnknownPathThrows) {
  try {
    force(static_cast<Isa>(42));
    ADD_FAILURE() << "an unknown isa ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
  }
}

// Paths this build or CPU cannot run throw ErrorCode::unsupported. On a machine that runs every
// compiled path there is nothing to force: the test reports itself skipped rather than passing.
TEST(Dispatch, ForcingAnUncompiledOrUnsupportedPathThrows) {
  const auto supported = supported_isas();
  int checked = 0;
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512, Isa::avx512_bf16}) {
    if (contains(supported, isa)) continue;
    ++checked;
    float x[16] = {};
    float y[16] = {};
    SdpaOptions opt;
    opt.isa = isa;
    try {
      scaled_dot_product_attention(TensorView::dense(static_cast<const float*>(x), {1, 1, 1, 16}),
                                   TensorView::dense(static_cast<const float*>(x), {1, 1, 1, 16}),
                                   TensorView::dense(static_cast<const float*>(x), {1, 1, 1, 16}),
                                   TensorView::dense(y, {1, 1, 1, 16}), opt);
      ADD_FAILURE() << "forcing " << isa_name(isa) << " did not throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::unsupported);
    }
  }
  if (checked == 0) GTEST_SKIP() << "this machine supports every compiled path";
}

// ATTEND_ISA with an unknown value: every call using the automatic path throws invalid_argument
// naming the variable (ctest runs this with ATTEND_ISA=sse9; a crash fails it, unlike WILL_FAIL).
TEST(Dispatch, UnknownEnvironmentValueThrows) {
  const char* env = std::getenv("ATTEND_ISA");
  if (!env || std::string(env) != "sse9") GTEST_SKIP() << "run by ctest with ATTEND_ISA=sse9";
  try {
    (void)active_isa();
    ADD_FAILURE() << "active_isa() accepted ATTEND_ISA=sse9";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("ATTEND_ISA"), std::string::npos) << e.what();
  }
  EXPECT_THROW(force(Isa::automatic), Error);
  EXPECT_NO_THROW(force(Isa::generic));  // a forced path does not read the variable
}

// Decode's request rules per machine class (ATTEND_DECODE_TUNING, else this machine's class; ctest
// runs this under every tuning): L2 requests 24 KiB ahead on a Zen 4 and the named AMX Xeons
// (amx_xeon), page starts 64 KiB ahead on a Zen 5 and the model-167 AMX Xeon (amx_xeon_pages: f32
// GQA groups over a blocked K and one row over a row-major K, and one row of a 16-bit K/V), none
// elsewhere; K's L1 requests for one f32 row over a blocked K dropped on the AMX Xeons (both rules)
// and a Zen 5 only; an 8-bit cache's one row on the integer kernels on the AMX Xeons only; an
// 8-bit cache's requests whole lines everywhere, none on a Zen 5, GQA groups and one row on the
// model-167 Xeon.
TEST(Dispatch, DecodeRequestRulesFollowTheMachineClass) {
  if (std::getenv("ATTEND_DECODE_L2_AHEAD")) GTEST_SKIP() << "ATTEND_DECODE_L2_AHEAD overrides the distance";
  if (std::getenv("ATTEND_DECODE_L2_PAGES")) GTEST_SKIP() << "ATTEND_DECODE_L2_PAGES overrides the request kind";
  if (std::getenv("ATTEND_DECODE_HW_STREAM")) GTEST_SKIP() << "ATTEND_DECODE_HW_STREAM overrides the cache's streams";
  if (std::getenv("ATTEND_DECODE_ONE_BLOCK")) GTEST_SKIP() << "ATTEND_DECODE_ONE_BLOCK overrides the scores' order";
  std::string tuning;
  if (const char* env = std::getenv("ATTEND_DECODE_TUNING"))
    tuning = env;
  else {
    const std::string cls = cpu_class().name;
    tuning = cls == "Zen 4"                   ? "zen4"
             : cls == "Zen 5"                 ? "zen5"
             : cls == "Xeon with AMX"         ? "amx_xeon_pages"
             : cls.find("Rapids") != cls.npos ? "amx_xeon"
                                              : "none";
  }
  SCOPED_TRACE("tuning " + tuning);
  const char* adapt = std::getenv("ATTEND_DECODE_ADAPT");
  const bool xeon = tuning == "amx_xeon" || tuning == "amx_xeon_pages";
  const bool l2 = tuning == "zen4" || tuning == "amx_xeon";
  const bool no_one_row_k = tuning == "zen5" || xeon;
  const bool pages = tuning == "zen5" || tuning == "amx_xeon_pages";
  EXPECT_EQ(dispatch::decode_l2_ahead_bytes(), l2 ? 24576 : pages ? 65536 : 0);
  EXPECT_EQ(dispatch::decode_l2_pages(kernels::KvType::f32), pages);
  EXPECT_EQ(dispatch::decode_l2_pages(kernels::KvType::bf16), pages);
  EXPECT_FALSE(dispatch::decode_l2_pages(kernels::KvType::i8));  // whole lines wherever it requests
  // What the public report (attend-info, attend-bench's context) says.
  const DecodeTuning told = decode_tuning();
  EXPECT_EQ(told.rules, tuning);
  EXPECT_EQ(told.rules_from_environment, std::getenv("ATTEND_DECODE_TUNING") != nullptr);
  EXPECT_EQ(told.l2_ahead_bytes, dispatch::decode_l2_ahead_bytes());
  EXPECT_EQ(told.l2_page_starts, pages);
  EXPECT_EQ(told.overrides, adapt ? "ATTEND_DECODE_ADAPT" : "");
  // The request kind chosen at run time: the model-167 Xeon's own rules only (named rules are fixed).
  const bool adaptive =
      adapt ? std::string(adapt) == "1" : tuning == "amx_xeon_pages" && !std::getenv("ATTEND_DECODE_TUNING");
  EXPECT_EQ(dispatch::decode_request_kind_adaptive(), adaptive);
  EXPECT_EQ(told.adaptive_request_kind, adaptive);
  // An 8-bit cache's one-row decode on the integer kernels: the AMX Xeons' rule only.
  EXPECT_EQ(dispatch::decode_i8_one_row_integer(), xeon);
  EXPECT_EQ(told.i8_one_row_integer, xeon);
  // A cache's blocked K/V left to the hardware prefetchers, blocks in address order: a Zen 4's rule
  // for f32 and 16-bit caches; an 8-bit cache and a row-major K (sdpa) keep their requests.
  EXPECT_EQ(told.hardware_stream, tuning == "zen4");
  for (kernels::KvType t : {kernels::KvType::f32, kernels::KvType::bf16, kernels::KvType::f16}) {
    EXPECT_EQ(dispatch::decode_hardware_stream(t, true), tuning == "zen4");
    EXPECT_FALSE(dispatch::decode_hardware_stream(t, false));
  }
  EXPECT_FALSE(dispatch::decode_hardware_stream(kernels::KvType::i8, true));  // its requests stay
  // A GQA group's scores over a blocked f32 or 8-bit K one block at a time, with their requests: a
  // Zen 5's rule; not one row, a row-major K, nor the 16-bit caches.
  EXPECT_EQ(told.one_block_scores, tuning == "zen5");
  for (bool gqa : {false, true})
    for (bool blocked : {false, true}) {
      for (kernels::KvType t : {kernels::KvType::f32, kernels::KvType::i8})
        EXPECT_EQ(dispatch::decode_one_block_scores(t, gqa, blocked), gqa && blocked && tuning == "zen5");
      for (kernels::KvType t : {kernels::KvType::bf16, kernels::KvType::f16})
        EXPECT_FALSE(dispatch::decode_one_block_scores(t, gqa, blocked));
    }
  using kernels::KvType;
  if (pages) {
    for (bool blocked : {false, true}) {
      EXPECT_EQ(dispatch::decode_l2_requests(KvType::f32, true, blocked), blocked);
      EXPECT_EQ(dispatch::decode_l2_requests(KvType::f32, false, blocked), !blocked);
      // An 8-bit cache: none on a Zen 5; GQA groups and one row on the model-167 Xeon.
      EXPECT_EQ(dispatch::decode_l2_requests(KvType::i8, true, blocked), tuning == "amx_xeon_pages");
      EXPECT_EQ(dispatch::decode_l2_requests(KvType::i8, false, blocked), tuning == "amx_xeon_pages");
      for (KvType t : {KvType::bf16, KvType::f16}) {
        EXPECT_FALSE(dispatch::decode_l2_requests(t, true, blocked));
        EXPECT_TRUE(dispatch::decode_l2_requests(t, false, blocked));
      }
    }
  }
  if (!pages)
    for (bool blocked : {false, true}) {
      EXPECT_TRUE(dispatch::decode_l2_requests(KvType::i8, true, blocked));
      EXPECT_EQ(dispatch::decode_l2_requests(KvType::i8, false, blocked), !xeon);
    }
  EXPECT_EQ(dispatch::decode_k_l1_requests(kernels::KvType::f32, false, true), !no_one_row_k);
  // GQA groups, a row-major K and the other storage types keep their K requests on every class.
  for (kernels::KvType t : {kernels::KvType::f32, kernels::KvType::bf16, kernels::KvType::f16, kernels::KvType::i8}) {
    EXPECT_TRUE(dispatch::decode_k_l1_requests(t, true, true));
    EXPECT_TRUE(dispatch::decode_k_l1_requests(t, false, false));
    if (t != kernels::KvType::f32) {
      EXPECT_TRUE(dispatch::decode_k_l1_requests(t, false, true));
    }
  }
}

// The request kind chooser (request_kind.hpp): kSamples pairs of timed calls (page starts, then
// whole lines), then the kind the median pair favoured run kExploit calls untimed, then pairs timed
// again; each key on its own; reports during an exploitation ignored.
TEST(RequestKindChooser, ExploresBothKindsThenRunsTheFasterThenExploresAgain) {
  using dispatch::RequestKind;
  using C = dispatch::RequestKindChooser;
  C c;
  const dispatch::RequestKey key{kernels::KvType::f32, 4, true, 128, false};
  dispatch::RequestKey other = key;
  other.group_rows = 8;
  // times(i): the pair i's (page starts, whole lines) seconds per byte.
  auto explore = [&](auto times) {
    for (int i = 0; i < 2 * C::kSamples; ++i) {
      EXPECT_EQ(c.exploiting(key), -1);
      const C::Choice ch = c.choose(key);
      EXPECT_TRUE(ch.timed);
      EXPECT_EQ(static_cast<int>(ch.kind), i % 2);  // pairs: page starts first
      const std::pair<double, double> t = times(i / 2);
      c.record(key, ch.kind, ch.kind == RequestKind::whole_lines ? t.second : t.first);
    }
  };
  explore([](int) { return std::pair{2.0, 1.0}; });  // whole lines twice as fast
  EXPECT_EQ(c.exploiting(key), 1);
  EXPECT_EQ(c.exploiting(other), -1);            // keys are separate
  c.record(key, RequestKind::page_starts, 0.0);  // (ignored: not exploring)
  for (int64_t i = 0; i < C::kExploit; ++i) {
    const C::Choice ch = c.choose(key);
    ASSERT_FALSE(ch.timed) << i;
    ASSERT_EQ(ch.kind, RequestKind::whole_lines) << i;
  }
  explore([](int) { return std::pair{1.0, 3.0}; });  // the state changed: page starts faster now
  EXPECT_EQ(c.exploiting(key), 0);
  for (int64_t i = 0; i < C::kExploit; ++i) ASSERT_EQ(c.choose(key).kind, RequestKind::page_starts);
  // Two outlying pairs do not decide: the median pair does.
  explore([](int i) { return i < 2 ? std::pair{0.01, 100.0} : std::pair{2.0, 1.0}; });
  EXPECT_EQ(c.exploiting(key), 1);
  for (int64_t i = 0; i < C::kExploit; ++i) c.choose(key);
  // Pairs over calls of different sizes (context lengths) compare within the pair: whole lines 10%
  // faster in four pairs of five decides, where each kind's median time (both the middle-sized
  // pair's, 3 against 3.6) would pick page starts.
  explore([](int i) {
    const double size = i + 1.0;
    return std::pair{size, (i == 2 ? 1.2 : 0.9) * size};
  });
  EXPECT_EQ(c.exploiting(key), 1);
  // A whole lines time with no page starts time before it is not a pair.
  c.reset();
  EXPECT_EQ(c.exploiting(key), -1);
  for (int i = 0; i < 2 * C::kSamples; ++i) c.record(key, RequestKind::whole_lines, 1.0);
  EXPECT_EQ(c.exploiting(key), -1);
  EXPECT_EQ(c.choose(key).kind, RequestKind::page_starts);
}

// More kinds of call than slots: the later keys share the last slot, and the chooser still works
// for every key (each gets a kind; none is lost).
TEST(RequestKindChooser, MoreKeysThanSlotsShareTheLast) {
  using dispatch::RequestKind;
  using C = dispatch::RequestKindChooser;
  C c;
  for (int k = 0; k < C::kKeys + 10; ++k) {
    const dispatch::RequestKey key{kernels::KvType::f32, 4, true, 16 * (k + 1), false};
    for (int i = 0; i < 2 * C::kSamples; ++i) {
      const C::Choice ch = c.choose(key);
      if (ch.timed) c.record(key, ch.kind, ch.kind == RequestKind::whole_lines ? 1.0 : 2.0);
    }
    EXPECT_EQ(c.exploiting(key), 1) << k;
  }
  EXPECT_EQ(c.exploiting({kernels::KvType::f32, 4, true, 16, false}), 1);  // the first slot kept its own
}

// Concurrent calls (threads choosing and reporting on two keys) leave the chooser consistent: each
// key ends exploiting the kind its reports made faster. (CI runs this under TSan.)
TEST(RequestKindChooser, ConcurrentCallsAreSafe) {
  using dispatch::RequestKind;
  using C = dispatch::RequestKindChooser;
  C c;
  const dispatch::RequestKey keys[2] = {{kernels::KvType::f32, 4, true, 128, false},
                                        {kernels::KvType::f32, 1, true, 128, false}};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&c, &keys, t] {
      for (int i = 0; i < 3000; ++i) {
        const int k = (i + t) % 2;  // whole lines faster on key 0, page starts on key 1
        const C::Choice ch = c.choose(keys[k]);
        if (ch.timed) c.record(keys[k], ch.kind, (ch.kind == RequestKind::whole_lines) == (k == 0) ? 1.0 : 2.0);
      }
    });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(c.exploiting(keys[0]), 1);
  EXPECT_EQ(c.exploiting(keys[1]), 0);
}

// Where the kind is chosen at run time (ctest runs this with ATTEND_DECODE_ADAPT=1 on every
// machine), a decode step's output is bitwise the same whichever kind it ran under: the same step
// repeated through two explorations of both kinds gives the same bits every time.
TEST(RequestKindChooser, DecodeBitsDoNotDependOnTheKind) {
  if (!dispatch::decode_request_kind_adaptive() || dispatch::decode_l2_ahead_bytes() == 0)
    GTEST_SKIP() << "the request kind is fixed here (ctest runs this with ATTEND_DECODE_ADAPT=1)";
  const int64_t D = 128, Hkv = 2, G = 4, L = 1500;
  std::vector<float> k(Hkv * L * D), v(Hkv * L * D), q(Hkv * G * D), o(Hkv * G * D);
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<float>((i * 7919) % 1000) / 500.0f - 1.0f;
    v[i] = static_cast<float>((i * 104729) % 1000) / 500.0f - 1.0f;
  }
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>((i * 31) % 100) / 50.0f - 1.0f;
  const std::pair<DType, kernels::KvType> types[] = {
      {DType::f32, kernels::KvType::f32}, {DType::bf16, kernels::KvType::bf16}, {DType::i8, kernels::KvType::i8}};
  for (const auto& [dt, kv] : types)
    for (int64_t group : {G, int64_t{1}}) {  // a GQA group of four, and one row per kv head
      SCOPED_TRACE(std::string(dtype_name(dt)) + " group " + std::to_string(group));
      KVCache cache({Hkv, D, 1, L, dt});
      const int64_t seq[] = {0};
      cache.append(0, TensorView(k.data(), {1, Hkv, L - 1, D}, {0, L * D, D, 1}),
                   TensorView(v.data(), {1, Hkv, L - 1, D}, {0, L * D, D, 1}));
      const dispatch::RequestKey key{kv, static_cast<int>(group), true, D, false};
      dispatch::request_kind_chooser().reset();
      std::vector<float> first;
      int explorations = 0, was = dispatch::request_kind_chooser().exploiting(key);
      for (int i = 0; i < 4 * dispatch::RequestKindChooser::kSamples + 2; ++i) {
        cache.truncate(0, L - 1);
        cached_attention(TensorView::dense(q.data(), {1, Hkv * group, 1, D}),
                         TensorView(k.data() + (L - 1) * D, {1, Hkv, 1, D}, {0, L * D, D, 1}),
                         TensorView(v.data() + (L - 1) * D, {1, Hkv, 1, D}, {0, L * D, D, 1}), cache, seq,
                         TensorView::dense(o.data(), {1, Hkv * group, 1, D}));
        if (i == 0)
          first.assign(o.begin(), o.begin() + Hkv * group * D);
        else
          ASSERT_EQ(0, std::memcmp(first.data(), o.data(), sizeof(float) * first.size())) << "call " << i;
        const int now = dispatch::request_kind_chooser().exploiting(key);
        if (was < 0 && now >= 0) ++explorations;  // both kinds ran
        was = now;
      }
      EXPECT_GE(explorations, 1);
    }
}

// ATTEND_DECODE_L2_AHEAD (decode's L2 request distance) must be a byte count,
// ATTEND_DECODE_L2_PAGES, ATTEND_DECODE_HW_STREAM and ATTEND_DECODE_ONE_BLOCK 0 or 1 and
// ATTEND_DECODE_TUNING a class name:
// anything else makes every
// call throw before it changes anything (a typo must not silently keep the default).
TEST(Dispatch, InvalidDecodeSettingThrowsAndChangesNothing) {
  std::string name;
  if (const char* env = std::getenv("ATTEND_DECODE_L2_AHEAD"); env && std::string(env) == "24kb")
    name = "ATTEND_DECODE_L2_AHEAD";
  else if (const char* env = std::getenv("ATTEND_DECODE_TUNING"); env && std::string(env) == "zen9")
    name = "ATTEND_DECODE_TUNING";
  else if (const char* env = std::getenv("ATTEND_DECODE_L2_PAGES"); env && std::string(env) == "yes")
    name = "ATTEND_DECODE_L2_PAGES";
  else if (const char* env = std::getenv("ATTEND_DECODE_HW_STREAM"); env && std::string(env) == "on")
    name = "ATTEND_DECODE_HW_STREAM";
  else if (const char* env = std::getenv("ATTEND_DECODE_ONE_BLOCK"); env && std::string(env) == "on")
    name = "ATTEND_DECODE_ONE_BLOCK";
  else if (const char* env = std::getenv("ATTEND_DECODE_ADAPT"); env && std::string(env) == "auto")
    name = "ATTEND_DECODE_ADAPT";
  else
    GTEST_SKIP() << "run by ctest with ATTEND_DECODE_L2_AHEAD=24kb, ATTEND_DECODE_L2_PAGES=yes, "
                    "ATTEND_DECODE_HW_STREAM=on, ATTEND_DECODE_ONE_BLOCK=on, ATTEND_DECODE_ADAPT=auto or "
                    "ATTEND_DECODE_TUNING=zen9";
  const int64_t D = 16;
  std::vector<float> q(4 * D, 0.5f), k(D, 0.25f), v(D, 1.0f), o(4 * D, 7.0f);
  KVCache cache({/*kv_heads*/ 1, D, /*slots*/ 1, /*capacity*/ 8});
  const int64_t seq[] = {0};
  try {
    cached_attention(TensorView::dense(q.data(), {1, 4, 1, D}), TensorView::dense(k.data(), {1, 1, 1, D}),
                     TensorView::dense(v.data(), {1, 1, 1, D}), cache, seq, TensorView::dense(o.data(), {1, 4, 1, D}));
    ADD_FAILURE() << "cached_attention accepted " << name << "=" << std::getenv(name.c_str());
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.length(0), 0);
  for (float x : o) EXPECT_EQ(x, 7.0f);
  EXPECT_THROW(scaled_dot_product_attention(
                   TensorView::dense(q.data(), {1, 4, 1, D}), TensorView::dense(k.data(), {1, 1, 1, D}),
                   TensorView::dense(v.data(), {1, 1, 1, D}), TensorView::dense(o.data(), {1, 4, 1, D})),
               Error);
  try {
    decode_tuning();
    ADD_FAILURE() << "decode_tuning accepted " << name;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
}

// ATTEND_AMX accepts 0 and 1 only: anything else fails every call (a typo must not silently pick a
// path), before anything is written.
TEST(Dispatch, InvalidAmxSettingThrows) {
  const char* env = std::getenv("ATTEND_AMX");
  if (!env || std::string(env) != "yes") GTEST_SKIP() << "run by ctest with ATTEND_AMX=yes";
  const int64_t D = 16;
  std::vector<float> q(4 * D, 0.5f), k(D, 0.25f), v(D, 1.0f), o(4 * D, 7.0f);
  SdpaOptions opt;
  opt.fpmath = FpMath::bf16;
  try {
    scaled_dot_product_attention(TensorView::dense(q.data(), {1, 4, 1, D}), TensorView::dense(k.data(), {1, 1, 1, D}),
                                 TensorView::dense(v.data(), {1, 1, 1, D}), TensorView::dense(o.data(), {1, 4, 1, D}),
                                 opt);
    ADD_FAILURE() << "sdpa accepted ATTEND_AMX=yes";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("ATTEND_AMX"), std::string::npos) << e.what();
  }
  for (float x : o) EXPECT_EQ(x, 7.0f);
}

TEST(Dispatch, CpuModelIsNamed) { EXPECT_FALSE(cpu_model().empty()); }

// The classes performance figures are quoted for. Family 25 holds both Zen 3 (no AVX-512) and
// Zen 4 (AVX-512 in two halves), so the AVX-512 bit decides; Zen 5's mobile parts keep half-width
// datapaths; other vendors and unknown families are not named (rather than guessed).
TEST(Dispatch, ClassifiesKnownCpuFamilies) {
  struct Case {
    const char* vendor;
    int family, model;
    bool avx512;
    const char* name;
    int bits;
  };
  const Case cases[] = {
      {"AuthenticAMD", 25, 0x11, true, "Zen 4", 256},  // EPYC 9004 (Genoa), this project's Zen 4
      {"AuthenticAMD", 25, 0xa0, true, "Zen 4", 256},  // EPYC 97x4 (Bergamo)
      {"AuthenticAMD", 25, 0x01, false, "Zen 3", 0},   // EPYC 7003 (Milan), this project's Zen 3
      {"AuthenticAMD", 25, 0x21, false, "Zen 3", 0},   // Ryzen 5000
      {"AuthenticAMD", 26, 0x02, true, "Zen 5", 512},  // EPYC 9005 (Turin)
      {"AuthenticAMD", 26, 0x11, true, "Zen 5", 512},  // EPYC 9005 dense
      {"AuthenticAMD", 26, 0x44, true, "Zen 5", 512},  // Ryzen 9000 (Granite Ridge)
      {"AuthenticAMD", 26, 0x24, true, "Zen 5", 256},  // Strix Point
      {"AuthenticAMD", 26, 0x02, false, "Zen 5", 0},   // AVX-512 not reported
      {"AuthenticAMD", 23, 0x31, false, "Zen 2", 0},   // EPYC 7002 (Rome)
      {"AuthenticAMD", 23, 0x01, false, "Zen / Zen+", 0},
      {"AuthenticAMD", 16, 0x04, false, "", 0},  // an older family
      {"GenuineIntel", 6, 0x8f, true, "Sapphire Rapids", 512},
      {"GenuineIntel", 6, 0xcf, true, "Emerald Rapids", 512},
      {"GenuineIntel", 6, 0xad, true, "Granite Rapids", 512},
      {"GenuineIntel", 6, 0x6a, true, "Ice Lake-SP", 512},
      {"GenuineIntel", 6, 0x55, true, "Skylake-SP / Cascade Lake", 512},
      {"GenuineIntel", 6, 0x7e, true, "Intel client AVX-512", 256},  // Ice Lake laptop: one 512-bit FMA
      {"GenuineIntel", 6, 0xa7, true, "Intel client AVX-512", 256},  // Rocket Lake
      {"GenuineIntel", 6, 0x97, false, "", 0},                       // Alder Lake: not classified
      {"GenuineIntel", 15, 0x04, false, "", 0},                      // NetBurst
      {"", 0, 0, false, "", 0},                                      // off x86
  };
  for (const Case& c : cases) {
    const dispatch::CpuClassification got = dispatch::classify_cpu(c.vendor, c.family, c.model, c.avx512);
    EXPECT_STREQ(got.name, c.name) << c.vendor << " " << c.family << "/" << c.model;
    EXPECT_EQ(got.avx512_bits, c.bits) << c.vendor << " " << c.family << "/" << c.model;
    // AMX (Sapphire Rapids on) names the class whatever model number a hypervisor shows (this
    // project's Intel machine: AMX under Rocket Lake's model 0xa7); the named AMX models keep their
    // names, and it never changes an AMD answer or an unknown vendor's.
    const dispatch::CpuClassification amx = dispatch::classify_cpu(c.vendor, c.family, c.model, c.avx512, true);
    const bool named_amx_model = c.model == 0x8f || c.model == 0xcf || c.model == 0xad;
    if (std::string(c.vendor) == "GenuineIntel" && c.family == 6 && !named_amx_model) {
      EXPECT_STREQ(amx.name, "Xeon with AMX") << c.model;
      EXPECT_EQ(amx.avx512_bits, c.avx512 ? 512 : 0) << c.model;
    } else {
      EXPECT_STREQ(amx.name, got.name) << c.vendor << " " << c.family << "/" << c.model;
      EXPECT_EQ(amx.avx512_bits, got.avx512_bits) << c.vendor << " " << c.family << "/" << c.model;
    }
  }
}

// FpMath::bf16 runs bf16 kernels when avx512_bf16 is forced (wherever the CPU has it), and under
// Isa::automatic only where they outrun the f32 FMAs: on AMX tiles, or vdpbf16ps on AMD's cores
// (not on Intel's: half the FMA rate). AMX exactly where the CPU and OS allow it.
TEST(Dispatch, Bf16MathWhereItIsFaster) {
  const std::vector<Isa> supported = supported_isas();
  const bool has = std::find(supported.begin(), supported.end(), Isa::avx512_bf16) != supported.end();
  if (has) {
    EXPECT_TRUE(bf16_math_native(Isa::avx512_bf16));
  }
  for (Isa isa : supported) {
    if (isa != Isa::avx512_bf16) {
      EXPECT_FALSE(bf16_math_native(isa)) << isa_name(isa);
    }
  }
  const bool automatic =
      active_isa() == Isa::avx512_bf16 && (cpu_class().vendor != "GenuineIntel" || dispatch::amx_bf16_math());
  EXPECT_EQ(bf16_math_native(), automatic) << cpu_class().vendor << " " << isa_name(active_isa());
  EXPECT_EQ(&dispatch::kernel_table_for(Isa::automatic, FpMath::bf16) ==
                &dispatch::kernel_table_for(Isa::automatic, FpMath::strict),
            !automatic);
  if (has) {
    EXPECT_NE(&dispatch::kernel_table_for(Isa::avx512_bf16, FpMath::bf16),
              &dispatch::kernel_table_for(Isa::avx512_bf16, FpMath::strict));
  }
  EXPECT_EQ(bf16_math_amx(Isa::avx512_bf16), has && dispatch::amx_bf16_math());
  if (dispatch::amx_bf16_math()) {
    EXPECT_STREQ(dispatch::kernel_table_for(Isa::avx512_bf16, FpMath::bf16).name, "bf16_flash_attention__avx512_amx");
  }
}

// cpu_class() reports this machine through the same classification, from CPUID (one of the two
// AVX-512 answers: the public API does not expose the raw CPUID bit).
TEST(Dispatch, CpuClassOfThisMachine) {
  const CpuClass c = cpu_class();
#if defined(__x86_64__)
  EXPECT_FALSE(c.vendor.empty());
  EXPECT_GT(c.family, 0);
#endif
  const bool amx = dispatch::cpu_features().cpuid_amx;
  const dispatch::CpuClassification with = dispatch::classify_cpu(c.vendor, c.family, c.model, true, amx),
                                    without = dispatch::classify_cpu(c.vendor, c.family, c.model, false, amx);
  EXPECT_TRUE((c.name == with.name && c.avx512_bits == with.avx512_bits) ||
              (c.name == without.name && c.avx512_bits == without.avx512_bits))
      << c.name << " " << c.avx512_bits;
}

}  // namespace
}  // namespace attend
