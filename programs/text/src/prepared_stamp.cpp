#include "ddp/text/prepared_stamp.h"

#include "ddp/common/ptree_json.h"

#include <zlib.h>

#include <algorithm>
#include <sstream>

namespace ddp::text {

namespace pt = boost::property_tree;

namespace {

// Boost's write_json writes every number as a string; the stamp's numbers are
// numbers (Python reads them as int), so the few lines of writing are here.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      static const char* hex = "0123456789abcdef";
      out += "\\u00";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::string prepared_path(const std::string& data_dir, const std::string& name) { return data_dir + "/" + name; }

std::uint32_t content_crc32(const std::string& bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes at most 4 GiB a call (uInt).
  for (std::size_t at = 0; at < bytes.size();) {
    const auto n = static_cast<uInt>(std::min<std::size_t>(bytes.size() - at, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), n);
    at += n;
  }
  return static_cast<std::uint32_t>(crc);
}

std::string serialize_stamp(const PreparedStamp& s) {
  std::ostringstream out;
  out << "{\"format\": " << json_string(s.format) << ", \"min_count\": " << s.min_count << ", \"sources\": [";
  for (std::size_t i = 0; i < s.sources.size(); ++i) {
    const auto& src = s.sources[i];
    out << (i ? ", " : "") << "{\"file\": " << json_string(src.file) << ", \"size\": " << src.size
        << ", \"mtime_ns\": " << src.mtime_ns << "}";
  }
  out << "], \"train_rows\": " << s.train_rows << ", \"test_rows\": " << s.test_rows
      << ", \"vocab_size\": " << s.vocab_size << ", \"vocab_crc32\": " << s.vocab_crc32
      << ", \"wordnet_dir\": " << json_string(s.wordnet_dir) << "}\n";
  return out.str();
}

std::optional<PreparedStamp> parse_stamp(const std::string& json) {
  // Boost's parser recurses once per '[' or '{' (deep nesting overflows the
  // stack, see common/src/error_file.cpp); a stamp has six of them.
  std::size_t brackets = 0;
  for (const char c : json) brackets += c == '[' || c == '{';
  if (brackets > 64) return std::nullopt;
  try {
    pt::ptree root;
    std::istringstream in(json);
    pt::read_json(in, root);
    PreparedStamp s;
    s.format = root.get<std::string>("format");
    s.min_count = root.get<std::int64_t>("min_count");
    for (const auto& [key, src] : root.get_child("sources")) {
      if (!key.empty()) return std::nullopt;  // an object, not an array
      s.sources.push_back(SourceStamp{src.get<std::string>("file"), src.get<std::int64_t>("size"),
                                      src.get<std::int64_t>("mtime_ns")});
    }
    s.train_rows = root.get<std::int64_t>("train_rows");
    s.test_rows = root.get<std::int64_t>("test_rows");
    s.vocab_size = root.get<std::int64_t>("vocab_size");
    s.vocab_crc32 = root.get<std::uint32_t>("vocab_crc32");
    s.wordnet_dir = root.get<std::string>("wordnet_dir");
    return s;
  } catch (const pt::ptree_error&) {
    return std::nullopt;
  }
}

}  // namespace ddp::text
