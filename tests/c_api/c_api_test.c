/* attend's C API from C11: every entry point against a plain double-precision reference written
 * here, and every kind of bad input answered by a status and a message with nothing changed.
 * Built by the test suite against the build tree and by tests/package/check_package.sh against the
 * installed package (gcc -std=c11 -Wall -Wextra -Werror, pkg-config --static attend). */
#include <attend/attend.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

#define OK(call)                                                                                  \
  do {                                                                                            \
    attend_status s_ = (call);                                                                    \
    if (s_ != ATTEND_OK) {                                                                        \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, attend_status_name(s_), \
              attend_last_error());                                                               \
      ++failures;                                                                                 \
    }                                                                                             \
  } while (0)

/* A failing call: the expected status and a message naming the function. */
#define FAILS(call, status, name)                                                                               \
  do {                                                                                                          \
    attend_status s_ = (call);                                                                                  \
    if (s_ != (status) || strstr(attend_last_error(), (name)) == NULL) {                                        \
      fprintf(stderr, "%s:%d: %s -> %s (%s), expected %s\n", __FILE__, __LINE__, #call, attend_status_name(s_), \
              attend_last_error(), attend_status_name(status));                                                 \
      ++failures;                                                                                               \
    }                                                                                                           \
  } while (0)

static unsigned rng_state = 12345u;
static float uniform(void) {
  rng_state = rng_state * 1664525u + 1013904223u;
  return (float)((rng_state >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}
static void fill(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = uniform();
}

/* bf16 bit pattern, round to nearest even (finite inputs). */
static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Reference: dense [B, Hq, Nq, D] / [B, Hkv, Nk, D]; pos_i = i + off (off = Nk − Nq, or 0 for
 * top-left); causal, softcap, sinks (per query head, or NULL), ALiBi slopes (or NULL). */
static void reference(const float* q, const float* k, const float* v, double* o, int B, int Hq, int Hkv, int Nq, int Nk,
                      int D, int causal, int top_left, float softcap, const float* sinks, const float* slopes) {
  const double scale = 1.0 / sqrt((double)D);
  const int off = top_left ? 0 : Nk - Nq;
  double* s = malloc(sizeof(double) * (size_t)Nk);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hq; ++h) {
      const int hk = h / (Hq / Hkv);
      for (int i = 0; i < Nq; ++i) {
        const float* qi = q + (((size_t)b * Hq + h) * Nq + i) * D;
        double m = sinks ? sinks[h] : -INFINITY;
        int any = 0;
        for (int j = 0; j < Nk; ++j) {
          const float* kj = k + (((size_t)b * Hkv + hk) * Nk + j) * D;
          double x = 0;
          for (int d = 0; d < D; ++d) x += (double)qi[d] * kj[d];
          x *= scale;
          if (softcap > 0) x = softcap * tanh(x / softcap);
          if (slopes) x += slopes[h] * (double)(j - (i + off));
          if (causal && j > i + off)
            x = -INFINITY;
          else
            any = 1;
          s[j] = x;
          if (x > m) m = x;
        }
        double l = sinks ? exp(sinks[h] - m) : 0.0;
        for (int j = 0; j < Nk; ++j) l += s[j] == -INFINITY ? 0.0 : exp(s[j] - m);
        double* oi = o + (((size_t)b * Hq + h) * Nq + i) * D;
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int j = 0; j < Nk; ++j)
            if (s[j] != -INFINITY) acc += exp(s[j] - m) * v[(((size_t)b * Hkv + hk) * Nk + j) * D + d];
          oi[d] = any ? acc / l : 0.0;
        }
      }
    }
  free(s);
}

static double max_error(const float* got, const double* want, size_t n) {
  double e = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = fabs((double)got[i] - want[i]);
    if (!(d <= e)) e = d; /* NaN propagates */
  }
  return e;
}

static void test_sdpa(void) {
  enum { B = 2, Hq = 4, Hkv = 2, Nq = 7, Nk = 17, D = 16 };
  static float q[B * Hq * Nq * D], k[B * Hkv * Nk * D], v[B * Hkv * Nk * D], o[B * Hq * Nq * D];
  static double want[B * Hq * Nq * D];
  fill(q, sizeof q / 4);
  fill(k, sizeof k / 4);
  fill(v, sizeof v / 4);
  attend_tensor tq = attend_tensor_dense(q, ATTEND_F32, B, Hq, Nq, D);
  attend_tensor tk = attend_tensor_dense(k, ATTEND_F32, B, Hkv, Nk, D);
  attend_tensor tv = attend_tensor_dense(v, ATTEND_F32, B, Hkv, Nk, D);
  attend_tensor to = attend_tensor_dense(o, ATTEND_F32, B, Hq, Nq, D);

  /* Defaults (NULL options), then every option. */
  OK(attend_sdpa(&tq, &tk, &tv, &to, NULL));
  reference(q, k, v, want, B, Hq, Hkv, Nq, Nk, D, 0, 0, 0.0f, NULL, NULL);
  CHECK(max_error(o, want, sizeof o / 4) < 1e-5);

  float sinks[Hq] = {0.5f, -1.0f, 2.0f, 0.0f}, slopes[Hq];
  OK(attend_alibi_slopes(Hq, slopes));
  CHECK(fabs(slopes[0] - 0.25) < 1e-7 && fabs(slopes[3] - 1.0 / 256) < 1e-9);
  for (int top_left = 0; top_left < 2; ++top_left) {
    attend_sdpa_options opt = {0};
    opt.causal = 1;
    opt.causal_alignment = top_left ? ATTEND_CAUSAL_TOP_LEFT : ATTEND_CAUSAL_BOTTOM_RIGHT;
    opt.softcap = 2.0f;
    opt.sinks = sinks;
    opt.sinks_count = Hq;
    opt.alibi_slopes = slopes;
    opt.alibi_slopes_count = Hq;
    opt.num_threads = 2;
    OK(attend_sdpa(&tq, &tk, &tv, &to, &opt));
    reference(q, k, v, want, B, Hq, Hkv, Nq, Nk, D, 1, top_left, 2.0f, sinks, slopes);
    CHECK(max_error(o, want, sizeof o / 4) < 1e-5);
    size_t bytes = 0;
    OK(attend_sdpa_workspace_bytes(&tq, &tk, &tv, &opt, &bytes));
  }

  /* bf16 tensors in and out (the reference on the rounded inputs). */
  static uint16_t q16[sizeof q / 4], k16[sizeof k / 4], v16[sizeof v / 4], o16[sizeof o / 4];
  static float qr[sizeof q / 4], kr[sizeof k / 4], vr[sizeof v / 4], got[sizeof o / 4];
  for (size_t i = 0; i < sizeof q / 4; ++i) qr[i] = from_bf16(q16[i] = to_bf16(q[i]));
  for (size_t i = 0; i < sizeof k / 4; ++i) kr[i] = from_bf16(k16[i] = to_bf16(k[i]));
  for (size_t i = 0; i < sizeof v / 4; ++i) vr[i] = from_bf16(v16[i] = to_bf16(v[i]));
  attend_tensor bq = attend_tensor_dense(q16, ATTEND_BF16, B, Hq, Nq, D);
  attend_tensor bk = attend_tensor_dense(k16, ATTEND_BF16, B, Hkv, Nk, D);
  attend_tensor bv = attend_tensor_dense(v16, ATTEND_BF16, B, Hkv, Nk, D);
  attend_tensor bo = attend_tensor_dense(o16, ATTEND_BF16, B, Hq, Nq, D);
  attend_sdpa_options causal = {0};
  causal.causal = 1;
  OK(attend_sdpa(&bq, &bk, &bv, &bo, &causal));
  reference(qr, kr, vr, want, B, Hq, Hkv, Nq, Nk, D, 1, 0, 0.0f, NULL, NULL);
  for (size_t i = 0; i < sizeof o / 4; ++i) got[i] = from_bf16(o16[i]);
  CHECK(max_error(got, want, sizeof o / 4) < 1e-2); /* the output's own bf16 rounding */

  /* Bad inputs: a status, a message, the output untouched. */
  for (size_t i = 0; i < sizeof o / 4; ++i) o[i] = 7.0f;
  FAILS(attend_sdpa(NULL, &tk, &tv, &to, NULL), ATTEND_ERROR_INVALID_ARGUMENT, "attend_sdpa");
  attend_tensor bad = tk;
  bad.shape[3] = 8;
  FAILS(attend_sdpa(&tq, &bad, &tv, &to, NULL), ATTEND_ERROR_INVALID_ARGUMENT, "sdpa");
  bad = tq;
  bad.dtype = (attend_dtype)9;
  FAILS(attend_sdpa(&bad, &tk, &tv, &to, NULL), ATTEND_ERROR_INVALID_ARGUMENT, "dtype");
  attend_sdpa_options opt = {0};
  opt.sinks_count = 4; /* a count with a NULL pointer */
  FAILS(attend_sdpa(&tq, &tk, &tv, &to, &opt), ATTEND_ERROR_INVALID_ARGUMENT, "sinks");
  opt.sinks_count = 0;
  opt.isa = (attend_isa)42;
  FAILS(attend_sdpa(&tq, &tk, &tv, &to, &opt), ATTEND_ERROR_INVALID_ARGUMENT, "isa");
  opt.isa = ATTEND_ISA_AUTOMATIC;
  opt.causal_alignment = (attend_causal_alignment)5;
  FAILS(attend_sdpa(&tq, &tk, &tv, &to, &opt), ATTEND_ERROR_INVALID_ARGUMENT, "causal_alignment");
  opt.causal_alignment = ATTEND_CAUSAL_BOTTOM_RIGHT;
  opt.softcap = -1.0f;
  FAILS(attend_sdpa(&tq, &tk, &tv, &to, &opt), ATTEND_ERROR_INVALID_ARGUMENT, "softcap");
  int any_changed = 0;
  for (size_t i = 0; i < sizeof o / 4; ++i) any_changed |= o[i] != 7.0f;
  CHECK(!any_changed);
  OK(attend_sdpa(&tq, &tk, &tv, &to, NULL));
  CHECK(attend_last_error()[0] == '\0'); /* a success clears the message */

  /* Every ISA this CPU runs, forced. */
  for (int i = ATTEND_ISA_GENERIC; i <= ATTEND_ISA_AVX512_BF16; ++i) {
    int supported = 0;
    OK(attend_isa_supported((attend_isa)i, &supported));
    attend_sdpa_options forced = {0};
    forced.isa = (attend_isa)i;
    if (supported) {
      OK(attend_sdpa(&tq, &tk, &tv, &to, &forced));
      reference(q, k, v, want, B, Hq, Hkv, Nq, Nk, D, 0, 0, 0.0f, NULL, NULL);
      CHECK(max_error(o, want, sizeof o / 4) < 1e-5);
    } else {
      FAILS(attend_sdpa(&tq, &tk, &tv, &to, &forced), ATTEND_ERROR_UNSUPPORTED, "");
    }
  }
}

/* Max error over rows [start, start + n) of every head of dense [H, N, D] arrays. */
static double rows_error(const float* got, const double* want, int H, int N, int D, int start, int n) {
  double err = 0;
  for (int h = 0; h < H; ++h)
    for (int i = start; i < start + n; ++i)
      for (int d = 0; d < D; ++d) {
        const double e = fabs(got[((size_t)h * N + i) * D + d] - want[((size_t)h * N + i) * D + d]);
        if (!(e <= err)) err = e; /* NaN propagates */
      }
  return err;
}

/* The slot cache and the paged cache: a prompt, then decode steps, against sdpa over the whole
 * sequence (its last rows). */
static void test_caches(void) {
  enum { Hq = 4, Hkv = 2, N = 21, D = 16, PROMPT = 18 };
  static float q[Hq * N * D], k[Hkv * N * D], v[Hkv * N * D], o[Hq * N * D];
  static double want[Hq * N * D];
  fill(q, sizeof q / 4);
  fill(k, sizeof k / 4);
  fill(v, sizeof v / 4);
  reference(q, k, v, want, 1, Hq, Hkv, N, N, D, 1, 0, 0.0f, NULL, NULL);

  attend_kv_cache* cache = NULL;
  attend_kv_cache_config cc = {Hkv, D, 2, 64, ATTEND_F32, 0};
  OK(attend_kv_cache_create(&cc, &cache));
  attend_paged_kv_cache* pool = NULL;
  attend_paged_kv_cache_config pc = {Hkv, D, 8, 16, ATTEND_F32, 0};
  OK(attend_paged_kv_cache_create(&pc, &pool));
  int64_t seq = -1;
  OK(attend_paged_kv_cache_create_sequence(pool, &seq));
  const int64_t slot[1] = {1};
  for (int start = 0; start < N;) {
    const int n = start == 0 ? PROMPT : 1;
    /* Views of rows [start, start + n) of the dense [1, H, N, D] tensors. */
    attend_tensor tq = attend_tensor_dense(q + (size_t)start * D, ATTEND_F32, 1, Hq, n, D);
    attend_tensor tk = attend_tensor_dense(k + (size_t)start * D, ATTEND_F32, 1, Hkv, n, D);
    attend_tensor tv = attend_tensor_dense(v + (size_t)start * D, ATTEND_F32, 1, Hkv, n, D);
    attend_tensor to = attend_tensor_dense(o + (size_t)start * D, ATTEND_F32, 1, Hq, n, D);
    tq.strides[1] = tq.strides[0] = (int64_t)N * D;
    tk.strides[1] = tk.strides[0] = (int64_t)N * D;
    tv.strides[1] = tv.strides[0] = (int64_t)N * D;
    to.strides[1] = to.strides[0] = (int64_t)N * D;
    OK(attend_cached_attention(&tq, &tk, &tv, cache, slot, 1, &to, NULL));
    CHECK(rows_error(o, want, Hq, N, D, start, n) < 1e-5);
    const attend_sequence_chunk chunk = {seq, n, NULL};
    int64_t needed = -1;
    OK(attend_paged_kv_cache_blocks_needed(pool, &chunk, 1, &needed));
    CHECK(needed >= 0);
    OK(attend_paged_attention(&tq, &tk, &tv, pool, &chunk, 1, &to, NULL));
    CHECK(rows_error(o, want, Hq, N, D, start, n) < 1e-5);
    start += n;
  }
  int64_t len = 0;
  OK(attend_kv_cache_length(cache, 1, &len));
  CHECK(len == N);
  OK(attend_paged_kv_cache_length(pool, seq, &len));
  CHECK(len == N);
  int64_t blocks = 0, free_blocks = 0, forked = -1, count = 0;
  OK(attend_paged_kv_cache_blocks(pool, seq, &blocks));
  CHECK(blocks == 2);
  OK(attend_paged_kv_cache_fork(pool, seq, &forked));
  OK(attend_paged_kv_cache_sequences(pool, &count));
  CHECK(count == 2);
  OK(attend_paged_kv_cache_truncate(pool, forked, 5));
  const int64_t kept[2] = {1, 3};
  OK(attend_paged_kv_cache_keep(pool, forked, 1, kept, 2));
  OK(attend_paged_kv_cache_length(pool, forked, &len));
  CHECK(len == 3);
  OK(attend_paged_kv_cache_release(pool, forked));
  OK(attend_paged_kv_cache_free_blocks(pool, &free_blocks));
  CHECK(free_blocks == 6);
  size_t bytes = 0;
  OK(attend_paged_kv_cache_memory_bytes(pool, &bytes));
  CHECK(bytes > 0);
  OK(attend_kv_cache_memory_bytes(cache, &bytes));
  CHECK(bytes > 0);

  /* Errors change nothing: an unknown sequence, a full pool (blocks_missing), a bad slot. */
  FAILS(attend_paged_kv_cache_length(pool, 999, &len), ATTEND_ERROR_INVALID_ARGUMENT, "");
  attend_tensor big_k = attend_tensor_dense(k, ATTEND_F32, 1, Hkv, N, D);
  attend_tensor big_v = attend_tensor_dense(v, ATTEND_F32, 1, Hkv, N, D);
  int64_t other = -1;
  OK(attend_paged_kv_cache_create_sequence(pool, &other));
  attend_status st = ATTEND_OK;
  int appended = 0;
  while (appended < 10 && (st = attend_paged_kv_cache_append(pool, other, &big_k, &big_v)) == ATTEND_OK) ++appended;
  /* 6 free blocks of 16 tokens: 84 tokens fit, 105 need one block more. */
  CHECK(st == ATTEND_ERROR_CAPACITY && appended == 4);
  CHECK(attend_last_blocks_missing() == 1);
  OK(attend_paged_kv_cache_length(pool, other, &len));
  CHECK(len == 4 * N);
  FAILS(attend_kv_cache_reset(cache, 7), ATTEND_ERROR_INVALID_ARGUMENT, "");
  FAILS(attend_kv_cache_length(NULL, 0, &len), ATTEND_ERROR_INVALID_ARGUMENT, "cache");
  FAILS(attend_kv_cache_length(cache, 0, NULL), ATTEND_ERROR_INVALID_ARGUMENT, "output");
  attend_kv_cache_config badc = {Hkv, D, 1, 16, (attend_dtype)11, 0};
  attend_kv_cache* none = NULL;
  FAILS(attend_kv_cache_create(&badc, &none), ATTEND_ERROR_INVALID_ARGUMENT, "dtype");
  CHECK(none == NULL);
  OK(attend_kv_cache_destroy(cache));
  OK(attend_paged_kv_cache_destroy(pool));
  OK(attend_kv_cache_destroy(NULL));
}

/* The layer from raw buffers: forward (causal) equals a prefill then decode steps through the
 * slot cache and the paged cache, and the bf16 form agrees within bf16's rounding. */
static void test_layer(void) {
  enum { DM = 32, H = 4, HKV = 2, HD = 8, T = 9 };
  static float wq[H * HD * DM], wk[HKV * HD * DM], wv[HKV * HD * DM], wo[DM * H * HD];
  static float x[T * DM], y[T * DM], y2[T * DM];
  fill(wq, sizeof wq / 4);
  fill(wk, sizeof wk / 4);
  fill(wv, sizeof wv / 4);
  fill(wo, sizeof wo / 4);
  fill(x, sizeof x / 4);
  attend_layer_config cfg = {0};
  cfg.d_model = DM;
  cfg.n_heads = H;
  cfg.n_kv_heads = HKV;
  cfg.causal = 1;
  cfg.rope = 1;
  attend_layer_weights w = {0};
  w.q = wq;
  w.k = wk;
  w.v = wv;
  w.o = wo;
  attend_layer* layer = NULL;
  OK(attend_layer_create(&cfg, &w, &layer));
  attend_layer_config got = {0};
  OK(attend_layer_get_config(layer, &got));
  CHECK(got.head_dim == HD && got.n_kv_heads == HKV && got.rope_theta == 10000.0);
  attend_context* ctx = NULL;
  OK(attend_context_create(2, 0, &ctx));
  attend_layer_options lo = {0};
  lo.context = ctx;
  OK(attend_layer_forward(layer, x, ATTEND_F32, y, ATTEND_F32, 1, T, &lo));

  attend_kv_cache* cache = NULL;
  attend_kv_cache_config cc = {HKV, HD, 1, 32, ATTEND_F32, 0};
  OK(attend_kv_cache_create(&cc, &cache));
  const int64_t slot[1] = {0};
  OK(attend_layer_forward_cached(layer, x, ATTEND_F32, y2, ATTEND_F32, 1, T - 2, cache, slot, 1, &lo));
  OK(attend_layer_forward_cached(layer, x + (T - 2) * DM, ATTEND_F32, y2 + (T - 2) * DM, ATTEND_F32, 1, 1, cache, slot,
                                 1, &lo));
  OK(attend_layer_forward_cached(layer, x + (T - 1) * DM, ATTEND_F32, y2 + (T - 1) * DM, ATTEND_F32, 1, 1, cache, slot,
                                 1, &lo));
  double err = 0, ymax = 0;
  for (int i = 0; i < T * DM; ++i) {
    err = fmax(err, fabs(y[i] - y2[i]));
    ymax = fmax(ymax, fabs(y[i]));
  }
  CHECK(err < 1e-5 * ymax);

  attend_paged_kv_cache* pool = NULL;
  attend_paged_kv_cache_config pc = {HKV, HD, 4, 0, ATTEND_BF16, 0};
  OK(attend_paged_kv_cache_create(&pc, &pool));
  int64_t seq = -1;
  OK(attend_paged_kv_cache_create_sequence(pool, &seq));
  const attend_sequence_chunk step = {seq, T, NULL};
  OK(attend_layer_forward_paged(layer, x, ATTEND_F32, y2, ATTEND_F32, &step, 1, pool, &lo));
  err = 0;
  for (int i = 0; i < T * DM; ++i) err = fmax(err, fabs(y[i] - y2[i]));
  CHECK(err < 2e-2 * ymax); /* bf16 storage of K/V */

  static uint16_t x16[T * DM], y16[T * DM];
  for (int i = 0; i < T * DM; ++i) x16[i] = to_bf16(x[i]);
  OK(attend_layer_forward(layer, x16, ATTEND_BF16, y16, ATTEND_BF16, 1, T, NULL));
  err = 0;
  for (int i = 0; i < T * DM; ++i) err = fmax(err, fabs(y[i] - from_bf16(y16[i])));
  CHECK(err < 3e-2 * ymax);

  /* Tensor parallelism: two shards' partial outputs sum to the whole layer's. */
  {
    static float part[T * DM];
    for (int i = 0; i < T * DM; ++i) y2[i] = 0.0f;
    for (int r = 0; r < 2; ++r) {
      attend_layer_config sc = cfg;
      sc.shard_rank = r;
      sc.shard_count = 2;
      attend_layer* shard = NULL;
      OK(attend_layer_create(&sc, &w, &shard));
      OK(attend_layer_forward(shard, x, ATTEND_F32, part, ATTEND_F32, 1, T, NULL));
      for (int i = 0; i < T * DM; ++i) y2[i] += part[i];
      OK(attend_layer_destroy(shard));
    }
    err = 0;
    for (int i = 0; i < T * DM; ++i) err = fmax(err, fabs(y[i] - y2[i]));
    CHECK(err < 1e-5 * ymax);
    attend_layer_config bad = cfg;
    bad.shard_count = 3; /* does not divide 4 heads */
    attend_layer* none3 = NULL;
    FAILS(attend_layer_create(&bad, &w, &none3), ATTEND_ERROR_INVALID_ARGUMENT, "shard_count");
  }

  /* Errors: a bad option, a cache of the wrong shape, missing weights — nothing written. */
  for (int i = 0; i < T * DM; ++i) y2[i] = 3.0f;
  lo.causal = 5;
  FAILS(attend_layer_forward(layer, x, ATTEND_F32, y2, ATTEND_F32, 1, T, &lo), ATTEND_ERROR_INVALID_ARGUMENT, "causal");
  lo.causal = 0;
  attend_kv_cache* wrong = NULL;
  attend_kv_cache_config wc = {HKV, HD * 2, 1, 32, ATTEND_F32, 0};
  OK(attend_kv_cache_create(&wc, &wrong));
  FAILS(attend_layer_forward_cached(layer, x, ATTEND_F32, y2, ATTEND_F32, 1, 1, wrong, slot, 1, &lo),
        ATTEND_ERROR_INVALID_ARGUMENT, "");
  int changed = 0;
  for (int i = 0; i < T * DM; ++i) changed |= y2[i] != 3.0f;
  CHECK(!changed);
  attend_layer_weights missing = w;
  missing.v = NULL;
  attend_layer* none = NULL;
  FAILS(attend_layer_create(&cfg, &missing, &none), ATTEND_ERROR_INVALID_ARGUMENT, "");
  CHECK(none == NULL);
  size_t bytes = 0;
  OK(attend_layer_weight_bytes(layer, &bytes));
  CHECK(bytes >= sizeof wq + sizeof wk + sizeof wv + sizeof wo);
  OK(attend_context_workspace_bytes(ctx, &bytes));
  OK(attend_context_release(ctx));
  OK(attend_kv_cache_destroy(wrong));
  OK(attend_kv_cache_destroy(cache));
  OK(attend_paged_kv_cache_destroy(pool));
  OK(attend_layer_destroy(layer));
  OK(attend_context_destroy(ctx));
}

int main(void) {
  const char* version = NULL;
  const char* isa = NULL;
  attend_isa active = ATTEND_ISA_AUTOMATIC;
  OK(attend_version(&version));
  OK(attend_active_isa(&active));
  OK(attend_isa_name(active, &isa));
  FAILS(attend_version(NULL), ATTEND_ERROR_INVALID_ARGUMENT, "attend_version");
  attend_cpu_class_info cls;
  memset(&cls, 0x7f, sizeof cls);
  OK(attend_cpu_class(&cls));
  /* NUL-terminated, a known width, and a named class has a vendor. */
  CHECK(memchr(cls.name, 0, sizeof cls.name) != NULL && memchr(cls.vendor, 0, sizeof cls.vendor) != NULL);
  CHECK(cls.avx512_bits == 0 || cls.avx512_bits == 256 || cls.avx512_bits == 512);
  CHECK(cls.name[0] == 0 || cls.vendor[0] != 0);
  FAILS(attend_cpu_class(NULL), ATTEND_ERROR_INVALID_ARGUMENT, "attend_cpu_class");
  {
    attend_decode_tuning_info tuning;
    memset(&tuning, 0x7f, sizeof tuning);
    if (getenv("ATTEND_DECODE_L2_AHEAD") || getenv("ATTEND_DECODE_L2_PAGES") || getenv("ATTEND_DECODE_TUNING") ||
        getenv("ATTEND_DECODE_HW_STREAM") || getenv("ATTEND_DECODE_ONE_BLOCK") || getenv("ATTEND_DECODE_ADAPT")) {
      /* (ctest runs the C API test without them) */
    } else {
      OK(attend_decode_tuning(&tuning));
      CHECK(memchr(tuning.rules, 0, sizeof tuning.rules) != NULL);
      CHECK(!strcmp(tuning.rules, "zen4") || !strcmp(tuning.rules, "zen5") || !strcmp(tuning.rules, "amx_xeon") ||
            !strcmp(tuning.rules, "amx_xeon_pages") || !strcmp(tuning.rules, "none"));
      CHECK(tuning.rules_from_environment == 0);
      /* Each class's distance: 24 KiB (Zen 4, the named AMX Xeons), 64 KiB page starts (Zen 5, the
       * model-167 AMX Xeon), none. */
      CHECK(!strcmp(tuning.rules, "zen5") || !strcmp(tuning.rules, "amx_xeon_pages")
                ? tuning.l2_ahead_bytes == 65536 && tuning.l2_page_starts == 1
            : !strcmp(tuning.rules, "none") ? tuning.l2_ahead_bytes == 0 && tuning.l2_page_starts == 0
                                            : tuning.l2_ahead_bytes == 24576 && tuning.l2_page_starts == 0);
      /* An 8-bit cache's one row on the integer kernels: the AMX Xeons' rule only. */
      CHECK(tuning.i8_one_row_integer ==
            (!strcmp(tuning.rules, "amx_xeon") || !strcmp(tuning.rules, "amx_xeon_pages")));
      /* The cache's K/V left to the hardware prefetchers: a Zen 4's rule only. */
      CHECK(tuning.hardware_stream == !strcmp(tuning.rules, "zen4"));
      /* The request kind chosen at run time: the model-167 AMX Xeon's rule only. */
      CHECK(tuning.adaptive_request_kind == !strcmp(tuning.rules, "amx_xeon_pages"));
      /* attend's bf16 GEMV takes up to 4 or 8 rows. */
      CHECK(tuning.bf16_gemv_rows == 4 || tuning.bf16_gemv_rows == 8);
      /* Its L2 requests: 24 KiB ahead, or none (Zen 5's rule). */
      CHECK(tuning.bf16_gemv_l2_ahead_bytes == 0 || tuning.bf16_gemv_l2_ahead_bytes == 24576);
      /* A GQA group's scores over an f32 or 8-bit cache one K block at a time: a Zen 5's rule only. */
      CHECK(tuning.one_block_scores == !strcmp(tuning.rules, "zen5"));
    }
    FAILS(attend_decode_tuning(NULL), ATTEND_ERROR_INVALID_ARGUMENT, "attend_decode_tuning");
  }
  printf("attend %s, C API, active ISA %s, cpu class %s\n", version, isa, cls.name[0] ? cls.name : "unknown");
  fflush(stdout);
  test_sdpa();
  test_caches();
  test_layer();
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("C API: all checks passed\n");
  return 0;
}
