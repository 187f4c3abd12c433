#pragma once
// The prepared directory (--data_dir) and its stamp. Files: train.csv,
// test.csv (csv.h), labels.txt (the 45 class names, line i = class i),
// vocab.txt (vocabulary.h) and prepared.json, written last by the
// preparation step (prepare.h) as the stamp:
//   {"format": "ddp-text-prepared-v1", "min_count": 2,
//    "sources": [{"file": "data.noun", "size": N, "mtime_ns": N}, ...],
//    "train_rows": N, "test_rows": N, "vocab_size": N, "vocab_crc32": N,
//    "wordnet_dir": "..."}
// vocab_crc32 is zlib's CRC-32 of vocab.txt's bytes: a vocabulary edited
// after preparation (two tokens swapped keep its size) gives the model's
// embedding rows other tokens, so it is checked before it is used.
// This file only names the files and turns a stamp into that JSON and back
// (Boost.PropertyTree reads it); it never touches the disk.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddp::text {

constexpr const char* kTrainCsv = "train.csv";
constexpr const char* kTestCsv = "test.csv";
constexpr const char* kLabelsTxt = "labels.txt";
constexpr const char* kVocabTxt = "vocab.txt";
constexpr const char* kPreparedJson = "prepared.json";
constexpr const char* kPreparedFormat = "ddp-text-prepared-v2";

// "<data_dir>/<name>".
std::string prepared_path(const std::string& data_dir, const std::string& name);

struct SourceStamp {
  std::string file;  // "data.noun", relative to wordnet_dir
  std::int64_t size = 0;
  std::int64_t mtime_ns = 0;
};

struct PreparedStamp {
  std::string format = kPreparedFormat;
  std::int64_t min_count = 0;
  std::vector<SourceStamp> sources;
  std::int64_t train_rows = 0;
  std::int64_t test_rows = 0;
  std::int64_t vocab_size = 0;
  std::uint32_t vocab_crc32 = 0;
  std::string wordnet_dir;
};

// zlib's CRC-32 of `bytes` (Python: zlib.crc32).
std::uint32_t content_crc32(const std::string& bytes);

// One line of JSON (keys in the order above, numbers as numbers), '\n' ended.
std::string serialize_stamp(const PreparedStamp& stamp);
// The stamp in `json`, or nullopt when it is not JSON or lacks a field.
std::optional<PreparedStamp> parse_stamp(const std::string& json);

}  // namespace ddp::text
