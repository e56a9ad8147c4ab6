// attend-info: what attend will run on this machine. `--json` prints one JSON object for fleets.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <attend/attend.hpp>
#include <cstdio>
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

std::string cache_size(int index) {
  std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
  std::string s;
  in >> s;
  return s.empty() ? "unknown" : s;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
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
  const std::string bf16_math =
      attend::bf16_math_native() ? "vdpbf16ps (avx512_bf16)" : "f32 (no AVX512_BF16 on the active path)";
  const std::string model = attend::cpu_model();
  // index0..3 on Linux are L1d, L1i, L2, L3 (per core / shared).
  const std::string l1d = cache_size(0), l2 = cache_size(2), l3 = cache_size(3);
  if (json) {
    std::printf(
        "{\"attend_version\":\"%s\",\"cpu_model\":\"%s\",\"isa_compiled\":%s,\"isa_supported\":%s,"
        "\"isa_active\":\"%s\",\"cache_l1d\":\"%s\",\"cache_l2\":\"%s\",\"cache_l3\":\"%s\",\"omp_threads\":%d,"
        "\"onednn_version\":\"%s\",\"onednn_isa\":\"%s\",\"fpmath_bf16\":\"%s\"}\n",
        ATTEND_VERSION_STRING, escape(model).c_str(), json_list(attend::compiled_isas()).c_str(),
        json_list(attend::supported_isas()).c_str(), active.c_str(), l1d.c_str(), l2.c_str(), l3.c_str(),
        omp_get_max_threads(), onednn.c_str(), onednn_isa.c_str(), bf16_math.c_str());
  } else {
    std::printf("attend %s\n", ATTEND_VERSION_STRING);
    std::printf("cpu            %s\n", model.c_str());
    std::printf("isa compiled   %s\n", join(attend::compiled_isas()).c_str());
    std::printf("isa supported  %s\n", join(attend::supported_isas()).c_str());
    std::printf("isa active     %s (cap with ATTEND_ISA=generic|avx2|avx512|avx512_bf16)\n", active.c_str());
    std::printf("fpmath bf16    %s\n", bf16_math.c_str());
    std::printf("caches         L1d %s, L2 %s, L3 %s\n", l1d.c_str(), l2.c_str(), l3.c_str());
    std::printf("omp threads    %d\n", omp_get_max_threads());
    std::printf("onednn         %s (isa %s)\n", onednn.c_str(), onednn_isa.c_str());
  }
  return 0;
}
