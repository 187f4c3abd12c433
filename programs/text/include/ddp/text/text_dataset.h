#pragma once
// Loads a prepared directory (prepare.h) for training: the vocabulary, the
// label names (checked against lexnames.h) and the two splits as token ids,
// flattened (row i is tokens[offsets[i], offsets[i+1])). Each text becomes
// its tokens' ids (tokenizer.h; kUnk for a token not in the vocabulary),
// [kUnk] when it has no token, truncated to max_length. Torch-free: the
// program turns the vectors into tensors. Throws TextDataError (one line
// naming the file, and what to run) for a missing or damaged file.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ddp/text/vocabulary.h"

namespace ddp::text {

struct TextSplit {
  std::vector<std::int32_t> tokens;   // all rows' ids, concatenated
  std::vector<std::int64_t> offsets;  // size() + 1 entries, offsets[0] = 0
  std::vector<std::uint8_t> labels;   // class of each row, 0..44

  std::size_t size() const { return labels.size(); }
  std::int64_t length(std::size_t row) const { return offsets[row + 1] - offsets[row]; }
};

// The rows of one CSV (csv.h); max_length >= 1 (std::invalid_argument otherwise).
TextSplit load_split(const std::string& csv_path, const Vocabulary& vocab, int max_length);

struct TextData {
  Vocabulary vocab;
  std::vector<std::string> label_names;  // labels.txt, = lexnames()
  TextSplit train;
  TextSplit test;
};

// Reads data_dir's vocab.txt, labels.txt, train.csv and test.csv, and checks
// the row and vocabulary counts and vocab.txt's CRC-32 against prepared.json
// (a directory mixing two preparations, or an edited vocabulary, is an
// error, not a silent mix).
TextData load_text_data(const std::string& data_dir, int max_length);

}  // namespace ddp::text
