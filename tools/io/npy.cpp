#include "npy.hpp"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace attend::io {
namespace {

[[noreturn]] void fail(const std::string& file, const std::string& what) { throw IoError(file + ": " + what); }

// The value of key `key` in NumPy's header dict literal, as raw text up to the next top-level
// comma or closing brace.
bool dict_value(const std::string& h, const std::string& key, std::string& out) {
  for (const char quote : {'\'', '"'}) {
    const std::string k = std::string(1, quote) + key + std::string(1, quote);
    const size_t at = h.find(k);
    if (at == std::string::npos) continue;
    size_t p = h.find(':', at + k.size());
    if (p == std::string::npos) return false;
    ++p;
    int depth = 0;
    size_t e = p;
    for (; e < h.size(); ++e) {
      const char c = h[e];
      if (c == '(' || c == '[')
        ++depth;
      else if (c == ')' || c == ']')
        --depth;
      else if ((c == ',' || c == '}') && depth == 0)
        break;
    }
    out = h.substr(p, e - p);
    const size_t b = out.find_first_not_of(" \t");
    const size_t l = out.find_last_not_of(" \t");
    out = b == std::string::npos ? std::string() : out.substr(b, l - b + 1);
    return true;
  }
  return false;
}

}  // namespace

NpyArray parse_npy(const std::vector<unsigned char>& bytes, const std::string& name) {
  static const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (bytes.size() < 10 || std::memcmp(bytes.data(), magic, 6) != 0) fail(name, "not an .npy file (bad magic)");
  const int major = bytes[6];
  size_t header_len = 0, header_at = 0;
  if (major == 1) {
    header_len = bytes[8] | (bytes[9] << 8);
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail(name, "truncated header");
    header_len = bytes[8] | (bytes[9] << 8) | (bytes[10] << 16) | (static_cast<size_t>(bytes[11]) << 24);
    header_at = 12;
  } else {
    fail(name, "unsupported .npy version " + std::to_string(major));
  }
  if (header_len > bytes.size() - header_at) fail(name, "header length beyond the file");
  const std::string h(bytes.begin() + static_cast<std::ptrdiff_t>(header_at),
                      bytes.begin() + static_cast<std::ptrdiff_t>(header_at + header_len));
  std::string descr, fortran, shape;
  if (!dict_value(h, "descr", descr) || !dict_value(h, "fortran_order", fortran) || !dict_value(h, "shape", shape))
    fail(name, "malformed header: " + h);
  if (descr != "'<f4'" && descr != "'|f4'" && descr != "\"<f4\"")
    fail(name, "dtype " + descr + " is not little-endian float32 ('<f4')");
  if (fortran != "False") fail(name, "fortran_order arrays are not supported (save with C order)");
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')') fail(name, "malformed shape " + shape);
  NpyArray a;
  uint64_t count = 1;
  size_t p = 1;
  while (p < shape.size() - 1) {
    while (p < shape.size() - 1 && (shape[p] == ' ' || shape[p] == ',')) ++p;
    if (p >= shape.size() - 1) break;
    if (!std::isdigit(static_cast<unsigned char>(shape[p]))) fail(name, "malformed shape " + shape);
    uint64_t v = 0;
    while (p < shape.size() - 1 && std::isdigit(static_cast<unsigned char>(shape[p]))) {
      v = v * 10 + static_cast<uint64_t>(shape[p] - '0');
      if (v > (uint64_t{1} << 40)) fail(name, "shape dimension too large in " + shape);
      ++p;
    }
    if (v != 0 && count > (uint64_t{1} << 40) / v) fail(name, "shape too large: " + shape);
    count *= v;
    a.shape.push_back(static_cast<int64_t>(v));
  }
  const size_t data_at = header_at + header_len;
  if (bytes.size() - data_at != count * 4)
    fail(name, "data is " + std::to_string(bytes.size() - data_at) + " bytes, shape " + shape + " needs " +
                   std::to_string(count * 4));
  a.data.resize(count);
  if (count) std::memcpy(a.data.data(), bytes.data() + data_at, count * 4);
  return a;
}

NpyArray load_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open file");
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_npy(bytes, path);
}

std::vector<unsigned char> npy_bytes(const NpyArray& a) {
  std::string shape = "(";
  for (size_t i = 0; i < a.shape.size(); ++i) {
    if (i) shape += ", ";
    shape += std::to_string(a.shape[i]);
  }
  if (a.shape.size() == 1) shape += ',';  // a Python 1-tuple
  shape += ')';
  std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + h.size() + 1) % 64 != 0) h += ' ';  // NumPy pads the header to a multiple of 64
  h += '\n';
  const unsigned char preamble[10] = {0x93,
                                      'N',
                                      'U',
                                      'M',
                                      'P',
                                      'Y',
                                      1,
                                      0,
                                      static_cast<unsigned char>(h.size() & 0xff),
                                      static_cast<unsigned char>(h.size() >> 8)};
  std::vector<unsigned char> out(10 + h.size() + a.data.size() * 4);
  std::memcpy(out.data(), preamble, 10);
  std::memcpy(out.data() + 10, h.data(), h.size());
  if (!a.data.empty()) std::memcpy(out.data() + 10 + h.size(), a.data.data(), a.data.size() * 4);
  return out;
}

void write_file_atomic(const std::string& path, const std::vector<unsigned char>& bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(path, "cannot create output file");
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      fail(path, "write failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail(path, "cannot move the output into place");
  }
}

}  // namespace attend::io
