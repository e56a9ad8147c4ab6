// attend-info: what attend will run on this machine. `--json` prints one JSON object for fleets.
#include <omp.h>
#if defined(ATTEND_INFO_LIBNUMA)
#include <numa.h>
#endif
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <attend/attend.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

std::string join(const std::vector<attend::Isa>& v) {
  std::string s;
  for (attend::Isa i : v) {
    if (!s.empty()) s += ',';
    s += attend::isa_name(i);
  }
  return s;
}

std::string json_list(const std::vector<attend::Isa>& v) {
  std::string s = "[";
  for (attend::Isa i : v) {
    if (s.size() > 1) s += ',';
    s += '"';
    s += attend::isa_name(i);
    s += '"';
  }
  s += ']';
  return s;
}

// A cache's size as the kernel's sysfs gives it ("48K"); where a VM has no sysfs cache entries,
// glibc's sysconf (read from CPUID), in the same form; "unknown" if neither knows.
std::string cache_size(int index, int sysconf_name) {
  std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
  std::string s;
  in >> s;
  if (!s.empty()) return s;
  const long bytes = sysconf(sysconf_name);
  return bytes > 0 ? std::to_string(bytes / 1024) + "K" : "unknown";
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// The NUMA nodes: from libnuma when attend-info was built with it (Debian libnuma-dev) and the
// kernel supports NUMA, else attend::numa_nodes() (sysfs). Returns the source's name.
std::string numa(std::vector<attend::NumaNode>& nodes) {
#if defined(ATTEND_INFO_LIBNUMA)
  if (numa_available() >= 0) {
    bitmask* cpus = numa_allocate_cpumask();
    for (int n = 0; n <= numa_max_node(); ++n) {
      if (!numa_bitmask_isbitset(numa_nodes_ptr, static_cast<unsigned>(n))) continue;
      attend::NumaNode node;
      node.id = n;
      if (numa_node_to_cpus(n, cpus) == 0)
        for (unsigned c = 0; c < cpus->size; ++c)
          if (numa_bitmask_isbitset(cpus, c)) node.cpus.push_back(static_cast<int>(c));
      long long free = 0;
      node.memory_bytes = numa_node_size64(n, &free);
      node.free_bytes = free;
      if (!node.cpus.empty()) nodes.push_back(node);
    }
    numa_free_cpumask(cpus);
    if (!nodes.empty()) return "libnuma";
  }
#endif
  nodes = attend::numa_nodes();
  return "sysfs";
}

// "0-3,8": a CPU list as the kernel writes one.
std::string cpu_ranges(const std::vector<int>& cpus) {
  std::string s;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!s.empty()) s += ',';
    s += std::to_string(cpus[i]) + (j > i ? "-" + std::to_string(cpus[j]) : "");
    i = j + 1;
  }
  return s;
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  CLI::App app("attend-info: the CPU, the ISA paths attend compiled, supports and runs, caches, threads and oneDNN");
  app.add_flag("--json", json, "print one JSON object (for collecting from a fleet)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);  // --help: usage on stdout, status 0; a bad argument: status 2
  }
  std::string active;
  try {
    active = attend::isa_name(attend::active_isa());
  } catch (const attend::Error& e) {
    std::fprintf(stderr, "attend-info: %s\n", e.what());
    return 1;
  }
  const std::string onednn = attend::onednn_version(), onednn_isa = attend::onednn_isa();
  // What SdpaOptions::fpmath = FpMath::bf16 runs on the active path.
  const bool bf16_tier = active == "avx512_bf16";
  const std::string bf16_math =
      attend::bf16_math_amx()      ? "AMX tiles, tdpbf16ps (avx512_bf16 + AMX-BF16; ATTEND_AMX=0: off)"
      : attend::bf16_math_native() ? "vdpbf16ps (avx512_bf16)"
      : bf16_tier                  ? "f32 (vdpbf16ps runs at half the FMA rate here; Isa::avx512_bf16 forces it)"
                                   : "f32 (no AVX512_BF16 on the active path)";
  // The decode requests' rules (runtime/dispatch/registry.cpp): whose, and what they set.
  attend::DecodeTuning tuning;
  try {
    tuning = attend::decode_tuning();
  } catch (const attend::Error& e) {
    std::fprintf(stderr, "attend-info: %s\n", e.what());
    return 1;
  }
  // The 8-bit cache's decode of 2+ rows per kv head (and of one row, under the AMX Xeons' rules):
  // integer dot products on the avx512_bf16 tier (which requires AVX512_VNNI), else its codes
  // widened to f32.
  const std::string i8_decode = !bf16_tier ? "f32 (codes widened)"
                                : tuning.i8_one_row_integer
                                    ? "vpdpwssd, 16-bit Q and weights (avx512_bf16), one row per kv head too"
                                    : "vpdpwssd, 16-bit Q and weights (avx512_bf16), 2+ rows per kv head (one: f32)";
  // The layer's bf16-weight projections of 1 to tuning.bf16_gemv_rows rows (decode): attend's GEMV
  // on the avx512_bf16 tier (runtime/kernels/ukernel/bf16_gemv.hpp) unless ATTEND_BF16_GEMV=0, else
  // oneDNN's matmul.
  const char* gemv_env = std::getenv("ATTEND_BF16_GEMV");
  const bool gemv_off = gemv_env && std::strcmp(gemv_env, "0") == 0;
  const std::string bf16_decode =
      bf16_tier && !gemv_off
          ? "attend gemv, vdpbf16ps, 1-" + std::to_string(tuning.bf16_gemv_rows) + " rows" +
                (tuning.overrides.find("ATTEND_BF16_GEMV_ROWS") != std::string::npos ? " (ATTEND_BF16_GEMV_ROWS)"
                                                                                     : "") +
                ", more on oneDNN; weights requested 4 KiB ahead into L1" +
                (tuning.bf16_gemv_l2_ahead_bytes > 0
                     ? ", " + std::to_string(tuning.bf16_gemv_l2_ahead_bytes / 1024) + " KiB into L2"
                     : std::string()) +
                " (ATTEND_BF16_GEMV=0: oneDNN)"
      : bf16_tier ? "oneDNN matmul (ATTEND_BF16_GEMV=0)"
                  : "oneDNN matmul";
  std::string decode_rules =
      tuning.rules + (tuning.rules_from_environment ? " (ATTEND_DECODE_TUNING)" : " (cpu class)");
  if (tuning.l2_ahead_bytes > 0)
    decode_rules += ": L2 requests " +
                    (tuning.l2_ahead_bytes % 1024 ? std::to_string(tuning.l2_ahead_bytes) + " bytes"
                                                  : std::to_string(tuning.l2_ahead_bytes / 1024) + " KiB") +
                    " ahead, " +
                    (tuning.l2_page_starts ? "one line per 4 KiB page (an 8-bit cache's every line)" : "every line");
  else
    decode_rules += ": no L2 requests";
  if (tuning.hardware_stream)
    decode_rules += "; a cache's K/V to the hardware prefetchers, blocks in order";
  else if (tuning.one_block_scores)
    decode_rules += "; a GQA group scores an f32 or 8-bit cache's K blocks one at a time";
  if (tuning.adaptive_request_kind && tuning.l2_ahead_bytes > 0)
    decode_rules += "; page starts or every line chosen at run time from the calls' times";
  if (!tuning.overrides.empty()) decode_rules += " (set by " + tuning.overrides + ")";
  const std::string model = attend::cpu_model();
  const attend::CpuClass cls = attend::cpu_class();
  // "Zen 4 (AuthenticAMD family 25 model 17): AVX-512 in two 256-bit halves"
  const std::string avx512_text = cls.avx512_bits == 256   ? "AVX-512 in two 256-bit halves"
                                  : cls.avx512_bits == 512 ? "AVX-512 full width"
                                                           : "";
  std::string class_text = cls.name.empty() ? std::string("unknown") : cls.name;
  if (!cls.vendor.empty())
    class_text +=
        " (" + cls.vendor + " family " + std::to_string(cls.family) + " model " + std::to_string(cls.model) + ")";
  if (!avx512_text.empty()) class_text += ": " + avx512_text;
  // index0..3 on Linux are L1d, L1i, L2, L3 (per core / shared).
  const std::string l1d = cache_size(0, _SC_LEVEL1_DCACHE_SIZE), l2 = cache_size(2, _SC_LEVEL2_CACHE_SIZE),
                    l3 = cache_size(3, _SC_LEVEL3_CACHE_SIZE);
  std::vector<attend::NumaNode> nodes;
  const std::string numa_source = numa(nodes);
  if (json) {
    std::string numa_json = "[";
    for (const attend::NumaNode& n : nodes) {
      if (numa_json.size() > 1) numa_json += ',';
      std::string cpus;
      for (int c : n.cpus) cpus += (cpus.empty() ? "" : ",") + std::to_string(c);
      numa_json += "{\"node\":" + std::to_string(n.id) + ",\"cpus\":[" + cpus +
                   "],\"memory_bytes\":" + std::to_string(n.memory_bytes) +
                   ",\"free_bytes\":" + std::to_string(n.free_bytes) + "}";
    }
    numa_json += "]";
    std::printf(
        "{\"attend_version\":\"%s\",\"cpu_model\":\"%s\",\"cpu_class\":\"%s\",\"cpu_vendor\":\"%s\","
        "\"cpu_family\":%d,\"cpu_model_number\":%d,\"avx512_bits\":%d,\"isa_compiled\":%s,\"isa_supported\":%s,"
        "\"isa_active\":\"%s\",\"cache_l1d\":\"%s\",\"cache_l2\":\"%s\",\"cache_l3\":\"%s\",\"omp_threads\":%d,"
        "\"onednn_version\":\"%s\",\"onednn_isa\":\"%s\",\"fpmath_bf16\":\"%s\",\"i8_decode\":\"%s\","
        "\"bf16_decode_projections\":\"%s\","
        "\"decode_tuning\":\"%s\",\"decode_tuning_from_environment\":%s,\"decode_l2_ahead_bytes\":%lld,"
        "\"decode_l2_page_starts\":%s,\"decode_i8_one_row_integer\":%s,\"decode_hardware_stream\":%s,"
        "\"decode_adaptive_request_kind\":%s,\"bf16_gemv_rows\":%lld,\"bf16_gemv_l2_ahead_bytes\":%lld,"
        "\"decode_one_block_scores\":%s,\"decode_overrides\":\"%s\","
        "\"numa_source\":\"%s\","
        "\"numa_nodes\":%s}\n",
        ATTEND_VERSION_STRING, escape(model).c_str(), escape(cls.name).c_str(), escape(cls.vendor).c_str(), cls.family,
        cls.model, cls.avx512_bits, json_list(attend::compiled_isas()).c_str(),
        json_list(attend::supported_isas()).c_str(), active.c_str(), l1d.c_str(), l2.c_str(), l3.c_str(),
        omp_get_max_threads(), onednn.c_str(), onednn_isa.c_str(), bf16_math.c_str(), i8_decode.c_str(),
        bf16_decode.c_str(), tuning.rules.c_str(), tuning.rules_from_environment ? "true" : "false",
        static_cast<long long>(tuning.l2_ahead_bytes), tuning.l2_page_starts ? "true" : "false",
        tuning.i8_one_row_integer ? "true" : "false", tuning.hardware_stream ? "true" : "false",
        tuning.adaptive_request_kind ? "true" : "false", static_cast<long long>(tuning.bf16_gemv_rows),
        static_cast<long long>(tuning.bf16_gemv_l2_ahead_bytes), tuning.one_block_scores ? "true" : "false",
        tuning.overrides.c_str(), numa_source.c_str(), numa_json.c_str());
  } else {
    std::printf("attend %s\n", ATTEND_VERSION_STRING);
    std::printf("cpu            %s\n", model.c_str());
    std::printf("cpu class      %s\n", class_text.c_str());
    std::printf("isa compiled   %s\n", join(attend::compiled_isas()).c_str());
    std::printf("isa supported  %s\n", join(attend::supported_isas()).c_str());
    std::printf("isa active     %s (cap with ATTEND_ISA=generic|avx2|avx512|avx512_bf16)\n", active.c_str());
    std::printf("fpmath bf16    %s\n", bf16_math.c_str());
    std::printf("i8 decode      %s\n", i8_decode.c_str());
    std::printf("bf16 decode    %s\n", bf16_decode.c_str());
    std::printf("decode rules   %s (ATTEND_DECODE_TUNING=zen4|zen5|amx_xeon|amx_xeon_pages|none)\n",
                decode_rules.c_str());
    std::printf("caches         L1d %s, L2 %s, L3 %s\n", l1d.c_str(), l2.c_str(), l3.c_str());
    std::printf("omp threads    %d\n", omp_get_max_threads());
    std::printf("onednn         %s (isa %s)\n", onednn.c_str(), onednn_isa.c_str());
    std::printf("numa           %zu node%s (%s)\n", nodes.size(), nodes.size() == 1 ? "" : "s", numa_source.c_str());
    for (const attend::NumaNode& n : nodes)
      std::printf("  node %-8d cpus %s, %s (%s free)\n", n.id, cpu_ranges(n.cpus).c_str(), gib(n.memory_bytes).c_str(),
                  gib(n.free_bytes).c_str());
  }
  return 0;
}
