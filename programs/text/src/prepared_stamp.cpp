#include "ddp/text/prepared_stamp.h"

#include "ddp/common/json_writer.h"
#include "ddp/common/ptree_json.h"

#include <zlib.h>

#include <algorithm>
#include <sstream>

namespace ddp::text {

namespace pt = boost::property_tree;

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

// Boost's write_json writes every number as a string; the stamp's numbers are
// numbers (Python reads them as int).
std::string serialize_stamp(const PreparedStamp& s) {
  json::Writer j(json::Ascii::utf8);
  j.object().key("format").string(s.format).key("min_count").integer(s.min_count).key("sources").array();
  for (const auto& src : s.sources)
    j.object().key("file").string(src.file).key("size").integer(src.size).key("mtime_ns").integer(src.mtime_ns).end();
  j.end().key("train_rows").integer(s.train_rows).key("test_rows").integer(s.test_rows);
  j.key("vocab_size").integer(s.vocab_size).key("vocab_crc32").integer(s.vocab_crc32);
  j.key("wordnet_dir").string(s.wordnet_dir).end();
  return j.text() + "\n";
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
