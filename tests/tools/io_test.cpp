// The file readers on hand-made good and bad files, and attend-run's handling of bad inputs
// end to end (non-zero exit, one message naming file and tensor, no output file).
#include <gtest/gtest.h>
#include <unistd.h>

#include <attend/attend.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "io/layer_file.hpp"
#include "io/npy.hpp"
#include "io/safetensors.hpp"
#include "io/svg_heatmap.hpp"

namespace attend::io {
namespace {

using Bytes = std::vector<unsigned char>;

// A safetensors image from a header given as JSON text and a data section of `data_bytes` bytes.
Bytes st_image(const std::string& header, size_t data_bytes, uint64_t declared_len = UINT64_MAX) {
  const uint64_t len = declared_len == UINT64_MAX ? header.size() : declared_len;
  Bytes b(8);
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<unsigned char>((len >> (8 * i)) & 0xff);
  b.insert(b.end(), header.begin(), header.end());
  for (size_t i = 0; i < data_bytes; ++i) b.push_back(static_cast<unsigned char>(i));
  return b;
}

void expect_rejected(const Bytes& b, const std::string& needle) {
  try {
    SafeTensors::parse(b, "bad.safetensors");
    ADD_FAILURE() << "accepted; expected an error mentioning '" << needle << "'";
  } catch (const IoError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bad.safetensors"), std::string::npos) << m;
    EXPECT_NE(m.find(needle), std::string::npos) << m << " (wanted: " << needle << ")";
  }
}

TEST(SafeTensors, ReadsF32Bf16F16) {
  // 1.5 and -2.0 in each dtype: f32 bits, bf16 (top half of f32), f16.
  Bytes data;
  auto put16 = [&](uint16_t v) {
    data.push_back(static_cast<unsigned char>(v & 0xff));
    data.push_back(static_cast<unsigned char>(v >> 8));
  };
  const float f[2] = {1.5f, -2.0f};
  const auto* fb = reinterpret_cast<const unsigned char*>(f);
  data.insert(data.end(), fb, fb + 8);
  put16(0x3fc0);
  put16(0xc000);  // bf16
  put16(0x3e00);
  put16(0xc000);  // f16
  const std::string h =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]},)"
      R"("c":{"dtype":"F16","shape":[2],"data_offsets":[12,16]},"__metadata__":{"format":"pt"}})";
  Bytes b = st_image(h, 0);
  b.insert(b.end(), data.begin(), data.end());
  const SafeTensors st = SafeTensors::parse(b, "good.safetensors");
  for (const char* n : {"a", "b", "c"}) EXPECT_EQ(st.read_f32(n), (std::vector<float>{1.5f, -2.0f})) << n;
  EXPECT_EQ(st.info("b").shape, (std::vector<int64_t>{1, 2}));
  try {
    st.read_f32("missing");
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor 'missing'"), std::string::npos);
  }
}

TEST(SafeTensors, RejectsMalformedFiles) {
  expect_rejected(Bytes{1, 2, 3}, "truncated");
  // Files of other formats are named: a .npy array (its header length would read as ~10^17 bytes)
  // and a zip archive (PyTorch's .pt/.bin).
  expect_rejected(npy_bytes(NpyArray{{2, 2}, std::vector<float>(4, 1.0f)}), "not a safetensors file: it is a .npy");
  expect_rejected(Bytes{'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0}, "not a safetensors file: it is a zip archive");
  expect_rejected(st_image("{}", 0, 1000), "beyond the file");
  expect_rejected(st_image("{\"a\": [", 0), "malformed JSON");
  expect_rejected(st_image("[1, 2]", 0), "not a JSON object");
  expect_rejected(st_image(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4), "dtype");
  expect_rejected(st_image(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4), "shape");
  expect_rejected(st_image(R"({"a":{"dtype":"F32","shape":[1]}})", 4), "data_offsets");
  expect_rejected(st_image(R"({"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})", 4), "unsupported dtype I32");
  expect_rejected(st_image(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "non-negative integers");
  expect_rejected(st_image(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4), "non-negative integers");
  // Non-finite header values: 1e400 overflows the JSON parser, NaN is not JSON at all; a finite
  // float where an integer belongs is rejected by name.
  expect_rejected(st_image(R"({"a":{"dtype":"F32","shape":[1e400],"data_offsets":[0,4]}})", 4), "number overflow");
  expect_rejected(st_image(R"({"a":{"dtype":"F32","shape":[NaN],"data_offsets":[0,4]}})", 4), "malformed JSON");
  expect_rejected(st_image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,1e400]}})", 4), "number overflow");
  expect_rejected(st_image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4.0]}})", 4),
                  "data_offsets must be non-negative integers");
  expect_rejected(st_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4), "out of range");
  expect_rejected(st_image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4), "out of range");
  expect_rejected(st_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4), "bytes of data for 2");
  expect_rejected(st_image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           12),
                  "overlap");
  expect_rejected(st_image(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4),
                  "implausibly large");
}

TEST(Npy, RoundTripsAndRejectsBadFiles) {
  for (std::vector<int64_t> shape : {std::vector<int64_t>{5}, {2, 3}, {2, 1, 4}, {0, 3}}) {
    NpyArray a;
    a.shape = shape;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    for (int64_t i = 0; i < n; ++i) a.data.push_back(0.5f * static_cast<float>(i) - 1.0f);
    const Bytes b = npy_bytes(a);
    EXPECT_EQ((b.size() - a.data.size() * 4) % 64, 0u) << "header not padded to 64 bytes";
    const NpyArray r = parse_npy(b, "x.npy");
    EXPECT_EQ(r.shape, a.shape);
    EXPECT_EQ(r.data, a.data);
  }
  NpyArray a{{2, 2}, {1, 2, 3, 4}};
  const Bytes good = npy_bytes(a);
  auto reject = [](const Bytes& b, const std::string& needle) {
    try {
      parse_npy(b, "bad.npy");
      ADD_FAILURE() << "accepted; expected '" << needle << "'";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.npy"), std::string::npos) << e.what();
    }
  };
  Bytes b = good;
  b[1] = 'X';
  reject(b, "bad magic");
  reject(Bytes(good.begin(), good.end() - 4), "data is 12 bytes");
  b = good;
  b[8] = 0xff;
  b[9] = 0xff;
  reject(b, "header length beyond the file");
  auto with_header = [&](std::string h) {
    Bytes o = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<unsigned char>(h.size()), 0};
    o.insert(o.end(), h.begin(), h.end());
    o.resize(o.size() + 16, 0);
    return o;
  };
  reject(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }"), "not little-endian float32");
  reject(with_header("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }"), "fortran_order");
  reject(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }"), "malformed shape");
  reject(with_header("{'descr': '<f4', 'fortran_order': False, }"), "malformed header");
}

// A Llama-style or nn.MultiheadAttention file with f32 tensors of the given shapes.
Bytes layer_file(const std::map<std::string, std::vector<int64_t>>& shapes) {
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> t;
  for (const auto& [name, shape] : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    t[name] = {shape, std::vector<float>(static_cast<size_t>(n), 0.01f)};
  }
  return write_safetensors_f32(t);
}

void expect_layer_error(const Bytes& b, int64_t heads, int64_t kv, const std::string& needle) {
  try {
    load_layer(SafeTensors::parse(b, "layer.safetensors"), "p.", heads, kv);
    ADD_FAILURE() << "accepted; expected '" << needle << "'";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layer.safetensors"), std::string::npos) << e.what();
  }
}

TEST(LayerFile, BothSchemesAndTheirErrors) {
  const Bytes llama = layer_file({{"p.q_proj.weight", {32, 16}},
                                  {"p.k_proj.weight", {8, 16}},
                                  {"p.v_proj.weight", {8, 16}},
                                  {"p.o_proj.weight", {16, 32}},
                                  {"p.q_proj.bias", {32}}});
  const LoadedLayer l = load_layer(SafeTensors::parse(llama, "l"), "p.", 4, 0);
  EXPECT_EQ(l.scheme, "llama");
  EXPECT_EQ(l.config.n_kv_heads, 1);  // 8 rows of head_dim 8
  EXPECT_EQ(l.config.head_dim, 8);
  EXPECT_TRUE(l.config.bias);  // partial biases: the missing ones are zeros
  EXPECT_EQ(l.bo, std::vector<float>(16, 0.0f));
  MultiHeadAttention layer(l.config, l.weights());  // a loaded layer constructs

  const Bytes mha = layer_file({{"p.in_proj_weight", {48, 16}}, {"p.out_proj.weight", {16, 16}}});
  const LoadedLayer m = load_layer(SafeTensors::parse(mha, "m"), "p.", 4, 0);
  EXPECT_EQ(m.scheme, "nn.MultiheadAttention");
  EXPECT_EQ(m.config.head_dim, 4);
  EXPECT_FALSE(m.config.bias);

  expect_layer_error(mha, 3, 0, "3 heads do not divide d_model 16");
  expect_layer_error(mha, 4, 2, "--kv-heads must equal --heads");
  expect_layer_error(layer_file({{"p.in_proj_weight", {48, 16}}}), 4, 0, "tensor 'p.out_proj.weight': missing");
  expect_layer_error(layer_file({{"p.in_proj_weight", {48, 16}}, {"p.out_proj.weight", {16, 15}}}), 4, 0,
                     "tensor 'p.out_proj.weight': shape [16,15], expected [16,16]");
  expect_layer_error(llama, 4, 2, "--kv-heads 2 but k_proj.weight holds 1");
  expect_layer_error(layer_file({{"p.q_proj.weight", {32, 16}}, {"p.k_proj.weight", {8, 16}}}), 4, 0,
                     "tensor 'p.v_proj.weight': missing");
  expect_layer_error(layer_file({{"x.weight", {1}}}), 4, 0, "no attention layer under prefix 'p.'");
}

TEST(SvgHeatmap, WellFormedAndDownsampled) {
  const int64_t n = 600;
  std::vector<float> w(static_cast<size_t>(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i) w[static_cast<size_t>(i * n + i)] = 1.0f;
  const std::string svg = attention_svg(w, n, n, "diag <test>", 100);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("diag &lt;test&gt;"), std::string::npos);
  EXPECT_NE(svg.find("600×600 averaged to 100×100"), std::string::npos);
  size_t cells = 0;
  for (size_t p = svg.find("<rect"); p != std::string::npos; p = svg.find("<rect", p + 1)) ++cells;
  EXPECT_EQ(cells, 100u * 100u + 64u + 3u);  // cells, colour scale, background and two frames
}

// Every tick label on the axes is a multiple of a round step (1, 2 or 5 × 10^k).
TEST(SvgHeatmap, RoundTicks) {
  EXPECT_EQ(round_tick_step(6), 1);
  EXPECT_EQ(round_tick_step(17), 5);
  EXPECT_EQ(round_tick_step(100), 20);
  EXPECT_EQ(round_tick_step(600), 100);
  EXPECT_EQ(round_tick_step(1300), 500);
  const int64_t n = 43;
  const std::string svg = attention_svg(std::vector<float>(n * n, 1.0f / n), n, n, "t", 256);
  int labels = 0;
  for (size_t p = svg.find("text-anchor=\"middle\">"); p != std::string::npos;
       p = svg.find("text-anchor=\"middle\">", p + 1)) {
    const size_t at = p + std::string("text-anchor=\"middle\">").size();
    if (!std::isdigit(static_cast<unsigned char>(svg[at]))) continue;
    EXPECT_EQ(std::stoll(svg.substr(at)) % round_tick_step(n), 0) << svg.substr(at, 8);
    ++labels;
  }
  EXPECT_GE(labels, 4);
}

// A causal map's weights fall like 1/(i+1) along the rows: on a linear scale most rows are in the
// bottom colour; on the log scale the rows are spread across the bar, and masked cells are grey.
TEST(SvgHeatmap, LogAndClippedScalesShowEveryRow) {
  const int64_t n = 200;
  std::vector<float> w(static_cast<size_t>(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) w[static_cast<size_t>(i * n + j)] = 1.0f / static_cast<float>(i + 1);
  auto distinct_fills = [](const std::string& svg) {
    std::set<std::string> fills;
    for (size_t p = svg.find("fill=\"#"); p != std::string::npos; p = svg.find("fill=\"#", p + 1))
      fills.insert(svg.substr(p + 6, 7));
    return fills;
  };
  const std::string linear = attention_svg(w, n, n, "c", 256, MapScale::linear);
  const std::string log = attention_svg(w, n, n, "c", 256, MapScale::log);
  const std::string clipped = attention_svg(w, n, n, "c", 256, MapScale::clipped);
  EXPECT_NE(log.find("#d9d9d9"), std::string::npos) << "masked cells are grey on the log scale";
  EXPECT_EQ(linear.find("#d9d9d9"), std::string::npos);
  // Rows 100 and 150 (weights 1/101 and 1/151 of the top) are told apart on the log scale.
  auto row_fill = [&](const std::string& svg, int64_t row) {
    const size_t p = svg.find("y=\"" + std::to_string(50 + row * 512 / n) + ".");
    return svg.substr(svg.find("fill=\"#", p) + 6, 7);
  };
  EXPECT_NE(row_fill(log, 100), row_fill(log, 150));
  EXPECT_GT(distinct_fills(log).size(), distinct_fills(linear).size());
  EXPECT_NE(clipped.find("clipped at the 99th percentile"), std::string::npos);
  EXPECT_NE(log.find(">1e0<"), std::string::npos) << "decade labels on the log bar";
}

// attend-run itself: each bad input exits 1 with one message naming the file (and tensor), and
// leaves no output file behind.
class AttendRunErrors : public ::testing::Test {
 protected:
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("attend_run_test_" + std::to_string(::getpid()));
  void SetUp() override { std::filesystem::create_directories(dir); }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::string path(const std::string& n) const { return (dir / n).string(); }
  void write(const std::string& n, const Bytes& b) const {
    std::ofstream(path(n), std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  // Runs attend-run; returns its exit status and stderr.
  std::pair<int, std::string> run(const std::string& args) const {
    const std::string err = path("stderr.txt");
    const int rc = std::system((std::string(ATTEND_RUN_PATH) + " " + args + " >/dev/null 2>" + err).c_str());
    std::ifstream in(err);
    return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, std::string((std::istreambuf_iterator<char>(in)), {})};
  }
  void expect_failure(const std::string& args, const std::string& needle) {
    const auto [rc, err] = run(args + " -o " + path("out.npy"));
    EXPECT_NE(rc, 0) << args;
    EXPECT_NE(err.find(needle), std::string::npos) << "stderr: " << err;
    EXPECT_FALSE(std::filesystem::exists(path("out.npy"))) << "partial output left by: " << args;
  }
};

TEST_F(AttendRunErrors, EachBadInputFailsCleanly) {
  write("layer.safetensors", layer_file({{"in_proj_weight", {48, 16}}, {"out_proj.weight", {16, 16}}}));
  write("x.npy", npy_bytes(NpyArray{{3, 16}, std::vector<float>(48, 0.1f)}));
  write("x15.npy", npy_bytes(NpyArray{{3, 15}, std::vector<float>(45, 0.1f)}));
  write("trunc.safetensors", Bytes{1, 2, 3, 4});
  Bytes no_out = layer_file({{"in_proj_weight", {48, 16}}});
  write("noout.safetensors", no_out);
  const std::string ok = "-w " + path("layer.safetensors") + " -i " + path("x.npy") + " --heads 4";
  // The good command works, so the failures below are about their one bad input.
  {
    const auto [rc, err] = run(ok + " -o " + path("good.npy"));
    EXPECT_EQ(rc, 0) << err;
    EXPECT_TRUE(std::filesystem::exists(path("good.npy")));
  }
  expect_failure("-w " + path("nope.safetensors") + " -i " + path("x.npy") + " --heads 4",
                 "nope.safetensors: cannot open");
  expect_failure("-w " + path("trunc.safetensors") + " -i " + path("x.npy") + " --heads 4",
                 "trunc.safetensors: truncated");
  expect_failure("-w " + path("noout.safetensors") + " -i " + path("x.npy") + " --heads 4",
                 "tensor 'out_proj.weight': missing");
  expect_failure(ok.substr(0, ok.find(" --heads")) + " --heads 3", "3 heads do not divide d_model 16");
  expect_failure("-w " + path("layer.safetensors") + " -i " + path("x15.npy") + " --heads 4",
                 "x15.npy: input shape [3,15]");
  expect_failure("-w " + path("layer.safetensors") + " -i " + path("missing.npy") + " --heads 4",
                 "missing.npy: cannot open");
  expect_failure(ok + " --decode 9", "--decode 9 must be within [0, 3]");
  {
    const auto [rc, err] = run(ok + " -o " + path("bf16.npy") + " --fpmath bf16");
    EXPECT_EQ(rc, 0) << err;
  }
  expect_failure(ok + " --fpmath tf32", "--fpmath");
  for (const char* dt : {"f32", "bf16", "f16", "i8"}) {  // every cache storage through --decode
    const auto [rc, err] =
        run(ok + " -o " + path(std::string("dec_") + dt + ".npy") + " --decode 2 --cache-dtype " + dt);
    EXPECT_EQ(rc, 0) << dt << ": " << err;
  }
  expect_failure(ok + " --decode 2 --cache-dtype u8", "--cache-dtype");
  // --shard R/N: a shard runs (its partial output written); a malformed or impossible one fails.
  {
    const auto [rc, err] = run(ok + " -o " + path("shard.npy") + " --shard 1/2 --decode 1");
    EXPECT_EQ(rc, 0) << err;
  }
  expect_failure(ok + " --shard 1", "--shard must be R/N");
  expect_failure(ok + " --shard 1/x", "--shard must be R/N");
  expect_failure(ok + " --shard 0/3", "shard_count 3 does not divide n_heads 4");
  expect_failure(ok + " --shard 4/4", "shard_rank 4 outside [0, shard_count = 4)");
  expect_failure(ok + " --attention-map " + path("m.svg") + " --head 7", "--head 7 outside [0, 4)");
  EXPECT_FALSE(std::filesystem::exists(path("m.svg")));
  // --attention-map without --head used to draw head 0 silently.
  expect_failure(ok + " --attention-map " + path("m.svg"), "--head");
  EXPECT_FALSE(std::filesystem::exists(path("m.svg")));
  write("x_as_weights.npy", npy_bytes(NpyArray{{3, 16}, std::vector<float>(48, 0.1f)}));
  expect_failure("-w " + path("x_as_weights.npy") + " -i " + path("x.npy") + " --heads 4",
                 "x_as_weights.npy: not a safetensors file");
}

// attend-info: --help prints usage and succeeds (it used to exit 2); --json prints one object.
TEST(AttendInfo, HelpAndJson) {
  const std::string out =
      (std::filesystem::temp_directory_path() / ("attend_info_" + std::to_string(::getpid()))).string();
  int rc = std::system((std::string(ATTEND_INFO_PATH) + " --help >" + out + " 2>&1").c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 0);
  std::string text((std::istreambuf_iterator<char>(std::ifstream(out).rdbuf())), {});
  EXPECT_NE(text.find("--json"), std::string::npos) << text;
  rc = std::system((std::string(ATTEND_INFO_PATH) + " --json >" + out).c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 0);
  text.assign((std::istreambuf_iterator<char>(std::ifstream(out).rdbuf())), {});
  EXPECT_EQ(text.rfind("{\"attend_version\"", 0), 0u) << text;
  // The machine class (what performance figures are quoted for) in both forms.
  EXPECT_NE(text.find("\"cpu_class\":\"" + cpu_class().name + "\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"avx512_bits\":" + std::to_string(cpu_class().avx512_bits)), std::string::npos) << text;
  // Cache sizes: from sysfs, or where a VM has no sysfs cache entries (this project's Zen 5 VMs),
  // from glibc's sysconf; "unknown" only where neither knows.
  const nlohmann::json info = nlohmann::json::parse(text);
  for (auto [key, name] : {std::pair{"cache_l1d", _SC_LEVEL1_DCACHE_SIZE}, std::pair{"cache_l2", _SC_LEVEL2_CACHE_SIZE},
                           std::pair{"cache_l3", _SC_LEVEL3_CACHE_SIZE}}) {
    const std::string size = info.at(key).get<std::string>();
    if (sysconf(name) > 0) {
      EXPECT_NE(size, "unknown") << key;
    }
    if (size != "unknown") {
      EXPECT_TRUE(size.size() > 1 && size.back() == 'K') << key << " " << size;
    }
  }
  // The decode requests' rules, as the library applies them.
  if (!std::getenv("ATTEND_DECODE_TUNING") && !std::getenv("ATTEND_DECODE_L2_AHEAD") &&
      !std::getenv("ATTEND_DECODE_L2_PAGES") && !std::getenv("ATTEND_DECODE_HW_STREAM") &&
      !std::getenv("ATTEND_DECODE_ONE_BLOCK") && !std::getenv("ATTEND_DECODE_ADAPT")) {
    const DecodeTuning t = decode_tuning();
    EXPECT_EQ(info.at("decode_tuning").get<std::string>(), t.rules);
    EXPECT_EQ(info.at("decode_l2_ahead_bytes").get<int64_t>(), t.l2_ahead_bytes);
    EXPECT_EQ(info.at("decode_l2_page_starts").get<bool>(), t.l2_page_starts);
    EXPECT_EQ(info.at("decode_i8_one_row_integer").get<bool>(), t.i8_one_row_integer);
    EXPECT_EQ(info.at("decode_hardware_stream").get<bool>(), t.hardware_stream);
    EXPECT_EQ(info.at("decode_adaptive_request_kind").get<bool>(), t.adaptive_request_kind);
    EXPECT_EQ(info.at("bf16_gemv_rows").get<int64_t>(), t.bf16_gemv_rows);
    EXPECT_EQ(info.at("bf16_gemv_l2_ahead_bytes").get<int64_t>(), t.bf16_gemv_l2_ahead_bytes);
    EXPECT_EQ(info.at("decode_one_block_scores").get<bool>(), t.one_block_scores);
    EXPECT_FALSE(info.at("decode_tuning_from_environment").get<bool>());
    rc = std::system(
        ("ATTEND_DECODE_TUNING=zen4 ATTEND_DECODE_L2_AHEAD=8192 " + std::string(ATTEND_INFO_PATH) + " --json >" + out)
            .c_str());
    EXPECT_EQ(WEXITSTATUS(rc), 0);
    const nlohmann::json set = nlohmann::json::parse(std::ifstream(out));
    EXPECT_EQ(set.at("decode_tuning").get<std::string>(), "zen4");
    EXPECT_TRUE(set.at("decode_tuning_from_environment").get<bool>());
    EXPECT_EQ(set.at("decode_l2_ahead_bytes").get<int64_t>(), 8192);
    EXPECT_FALSE(set.at("decode_l2_page_starts").get<bool>());
    EXPECT_FALSE(set.at("decode_i8_one_row_integer").get<bool>());     // not a Zen 4's rule
    EXPECT_TRUE(set.at("decode_hardware_stream").get<bool>());         // a Zen 4's rule
    EXPECT_FALSE(set.at("decode_adaptive_request_kind").get<bool>());  // named rules are fixed
    EXPECT_FALSE(set.at("decode_one_block_scores").get<bool>());       // a Zen 5's rule
    EXPECT_EQ(set.at("decode_overrides").get<std::string>(), "ATTEND_DECODE_L2_AHEAD");
    // The scores' order forced on any rules, and said so.
    rc = std::system(
        ("ATTEND_DECODE_TUNING=zen4 ATTEND_DECODE_ONE_BLOCK=1 " + std::string(ATTEND_INFO_PATH) + " --json >" + out)
            .c_str());
    EXPECT_EQ(WEXITSTATUS(rc), 0);
    const nlohmann::json one = nlohmann::json::parse(std::ifstream(out));
    EXPECT_TRUE(one.at("decode_one_block_scores").get<bool>());
    EXPECT_EQ(one.at("decode_overrides").get<std::string>(), "ATTEND_DECODE_ONE_BLOCK");
    // A value no attention call would accept: attend-info says so and fails.
    rc = std::system(("ATTEND_DECODE_L2_PAGES=yes " + std::string(ATTEND_INFO_PATH) + " >/dev/null 2>" + out).c_str());
    EXPECT_NE(WEXITSTATUS(rc), 0);
    text.assign((std::istreambuf_iterator<char>(std::ifstream(out).rdbuf())), {});
    EXPECT_NE(text.find("ATTEND_DECODE_L2_PAGES"), std::string::npos) << text;
  }
  rc = std::system((std::string(ATTEND_INFO_PATH) + " >" + out).c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 0);
  text.assign((std::istreambuf_iterator<char>(std::ifstream(out).rdbuf())), {});
  EXPECT_NE(text.find("cpu class      " + (cpu_class().name.empty() ? std::string("unknown") : cpu_class().name)),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("decode rules   "), std::string::npos) << text;
  rc = std::system((std::string(ATTEND_INFO_PATH) + " --no-such-flag >/dev/null 2>&1").c_str());
  EXPECT_NE(WEXITSTATUS(rc), 0);
  std::filesystem::remove(out);
}

}  // namespace
}  // namespace attend::io
