#include "safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "../../runtime/numeric/convert.hpp"

namespace attend::io {
namespace {

[[noreturn]] void fail(const std::string& file, const std::string& what) { throw IoError(file + ": " + what); }

int64_t dtype_bytes(StDtype t) { return t == StDtype::f32 ? 4 : 2; }

// A JSON number that is a non-negative integer representable in int64 (rejects floats, negative
// values and anything parsed as a non-finite double).
bool as_index(const nlohmann::json& j, uint64_t& out) {
  if (j.is_number_unsigned()) {
    out = j.get<uint64_t>();
    return out <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  }
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

}  // namespace

SafeTensors SafeTensors::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open file");
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(path, "read error");
  return parse(std::move(bytes), path);
}

SafeTensors SafeTensors::parse(std::vector<unsigned char> bytes, const std::string& name) {
  SafeTensors st;
  st.name_ = name;
  // A file of another format gets named rather than parsed as an absurd header length.
  static const unsigned char kNpyMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (bytes.size() >= 6 && std::equal(kNpyMagic, kNpyMagic + 6, bytes.begin()))
    fail(name, "not a safetensors file: it is a .npy array (attend-run takes weights as .safetensors, inputs as .npy)");
  if (bytes.size() >= 4 && bytes[0] == 'P' && bytes[1] == 'K' && bytes[2] == 3 && bytes[3] == 4)
    fail(name,
         "not a safetensors file: it is a zip archive (a PyTorch .pt/.bin checkpoint?); convert it to "
         ".safetensors");
  if (bytes.size() < 8) fail(name, "truncated: " + std::to_string(bytes.size()) + " bytes, no 8-byte header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[static_cast<size_t>(i)];
  if (header_len > bytes.size() - 8)
    fail(name, "header length " + std::to_string(header_len) + " is beyond the file (" + std::to_string(bytes.size()) +
                   " bytes): not a safetensors file, or a truncated one");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header_len));
  } catch (const nlohmann::json::exception& e) {
    fail(name, std::string("malformed JSON header: ") + e.what());
  }
  if (!header.is_object()) fail(name, "header is not a JSON object");
  st.data_start_ = 8 + header_len;
  const uint64_t data_size = bytes.size() - st.data_start_;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string where = "tensor '" + it.key() + "'";
    const nlohmann::json& t = it.value();
    if (!t.is_object()) fail(name, where + ": entry is not an object");
    if (!t.contains("dtype") || !t["dtype"].is_string()) fail(name, where + ": missing or non-string dtype");
    if (!t.contains("shape") || !t["shape"].is_array()) fail(name, where + ": missing or non-array shape");
    if (!t.contains("data_offsets") || !t["data_offsets"].is_array() || t["data_offsets"].size() != 2)
      fail(name, where + ": data_offsets must be [begin, end]");
    StTensor info;
    const std::string dt = t["dtype"].get<std::string>();
    if (dt == "F32")
      info.dtype = StDtype::f32;
    else if (dt == "BF16")
      info.dtype = StDtype::bf16;
    else if (dt == "F16")
      info.dtype = StDtype::f16;
    else
      fail(name, where + ": unsupported dtype " + dt + " (F32, BF16 and F16 are supported)");
    uint64_t numel = 1;
    for (const auto& d : t["shape"]) {
      uint64_t v = 0;
      if (!as_index(d, v)) fail(name, where + ": shape entries must be non-negative integers, got " + d.dump());
      if (v != 0 && numel > (uint64_t{1} << 48) / v) fail(name, where + ": shape is implausibly large");
      numel *= v;
      info.shape.push_back(static_cast<int64_t>(v));
    }
    if (!as_index(t["data_offsets"][0], info.begin) || !as_index(t["data_offsets"][1], info.end))
      fail(name, where + ": data_offsets must be non-negative integers, got " + t["data_offsets"].dump());
    if (info.begin > info.end || info.end > data_size)
      fail(name, where + ": data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
                     "] out of range (data section is " + std::to_string(data_size) + " bytes)");
    if (info.end - info.begin != numel * static_cast<uint64_t>(dtype_bytes(info.dtype)))
      fail(name, where + ": " + std::to_string(info.end - info.begin) + " bytes of data for " + std::to_string(numel) +
                     " elements of " + dt);
    ranges.emplace_back(info.begin, info.end);
    st.tensors_.emplace(it.key(), std::move(info));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second && ranges[i].first != ranges[i].second &&
        ranges[i - 1].first != ranges[i - 1].second)
      fail(name, "tensor data ranges overlap at byte " + std::to_string(ranges[i].first));
  st.bytes_ = std::move(bytes);
  return st;
}

const StTensor& SafeTensors::info(const std::string& tensor) const {
  auto it = tensors_.find(tensor);
  if (it == tensors_.end()) fail(name_, "missing tensor '" + tensor + "'");
  return it->second;
}

std::vector<float> SafeTensors::read_f32(const std::string& tensor) const {
  const StTensor& t = info(tensor);
  const unsigned char* p = bytes_.data() + data_start_ + t.begin;
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (t.dtype == StDtype::f32) {
      std::memcpy(&out[i], p + 4 * i, 4);  // little-endian host (x86-64, aarch64)
    } else {
      const uint16_t h = static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8));
      out[i] = t.dtype == StDtype::bf16 ? numeric::from_bf16(h) : numeric::from_f16(h);
    }
  }
  return out;
}

std::vector<unsigned char> write_safetensors_f32(
    const std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [n, t] : tensors) {
    const uint64_t bytes = t.second.size() * 4;
    header[n] = {{"dtype", "F32"}, {"shape", t.first}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  const std::string h = header.dump();
  std::vector<unsigned char> out(8 + h.size());
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<unsigned char>((h.size() >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, h.data(), h.size());
  for (const auto& [n, t] : tensors) {
    const auto* p = reinterpret_cast<const unsigned char*>(t.second.data());
    out.insert(out.end(), p, p + t.second.size() * 4);
  }
  return out;
}

}  // namespace attend::io
