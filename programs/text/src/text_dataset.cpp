#include "ddp/text/text_dataset.h"

#include "ddp/text/csv.h"
#include "ddp/text/lexnames.h"
#include "ddp/text/prepared_stamp.h"
#include "ddp/text/text_data_error.h"
#include "ddp/text/tokenizer.h"
#include "file_bytes.h"

#include <stdexcept>

namespace ddp::text {

namespace {

std::string not_found(const std::string& path, const std::string& data_dir) {
  return path + " not found; run `ddp-text --prepare_only --data_dir " + data_dir +
         "` (or just ddp-text) to prepare it";
}

void check_labels(const std::string& data_dir) {
  const std::string path = prepared_path(data_dir, kLabelsTxt);
  const auto data = detail::read_file_bytes(path, reprepare_hint(data_dir));
  if (!data) throw TextDataError(not_found(path, data_dir));
  std::size_t pos = 0;
  for (int i = 0; i < kNumClasses; ++i) {
    const std::size_t eol = data->find('\n', pos);
    const std::string got = eol == std::string::npos ? data->substr(pos) : data->substr(pos, eol - pos);
    if (got != lexname(i) || eol == std::string::npos)
      throw TextDataError(path + ":" + std::to_string(i + 1) + ": '" + got.substr(0, 40) + "' where class " +
                          std::to_string(i) + " '" + lexname(i) + "' belongs (the 45 lexnames(5WN) classes in " +
                          "order, one a line); " + reprepare_hint(data_dir));
    pos = eol + 1;
  }
  if (pos != data->size())
    throw TextDataError(path + ":" + std::to_string(kNumClasses + 1) + ": more than the " +
                        std::to_string(kNumClasses) + " classes; " + reprepare_hint(data_dir));
}

}  // namespace

TextSplit load_split(const std::string& csv_path, const Vocabulary& vocab, int max_length) {
  if (max_length < 1) throw std::invalid_argument("max_length " + std::to_string(max_length) + " must be >= 1");
  const auto rows = read_labeled_csv(csv_path, lexnames());
  TextSplit split;
  split.labels.reserve(rows.size());
  split.offsets.reserve(rows.size() + 1);
  split.tokens.reserve(rows.size() * 16);
  split.offsets.push_back(0);
  for (const auto& row : rows) {
    const std::size_t begin = split.tokens.size();
    for_each_token(row.text, [&](std::string_view t) {
      if (split.tokens.size() - begin < static_cast<std::size_t>(max_length)) split.tokens.push_back(vocab.id(t));
    });
    if (split.tokens.size() == begin) split.tokens.push_back(Vocabulary::kUnk);
    split.offsets.push_back(static_cast<std::int64_t>(split.tokens.size()));
    split.labels.push_back(static_cast<std::uint8_t>(row.label));
  }
  return split;
}

TextData load_text_data(const std::string& data_dir, int max_length) {
  const std::string stamp_path = prepared_path(data_dir, kPreparedJson);
  const auto json = detail::read_file_bytes(stamp_path, reprepare_hint(data_dir));
  if (!json) throw TextDataError(not_found(stamp_path, data_dir));
  const auto stamp = parse_stamp(*json);
  if (!stamp || stamp->format != kPreparedFormat)
    throw TextDataError(stamp_path + ": not a " + kPreparedFormat + " stamp; " + reprepare_hint(data_dir));
  check_labels(data_dir);
  const std::string vocab_path = prepared_path(data_dir, kVocabTxt);
  const auto vocab_bytes = detail::read_file_bytes(vocab_path, reprepare_hint(data_dir));
  if (!vocab_bytes) throw TextDataError(not_found(vocab_path, data_dir));
  TextData data{Vocabulary::parse(*vocab_bytes, vocab_path), lexnames(), {}, {}};
  data.train = load_split(prepared_path(data_dir, kTrainCsv), data.vocab, max_length);
  data.test = load_split(prepared_path(data_dir, kTestCsv), data.vocab, max_length);
  const auto mismatch = [&](const char* file, const std::string& what, std::int64_t got, std::int64_t want) {
    throw TextDataError(prepared_path(data_dir, file) + " has " + std::to_string(got) + " " + what + " but " +
                        kPreparedJson + " says " + std::to_string(want) + " (files of two preparations); " +
                        reprepare_hint(data_dir));
  };
  if (static_cast<std::int64_t>(data.vocab.size()) != stamp->vocab_size)
    mismatch(kVocabTxt, "tokens", static_cast<std::int64_t>(data.vocab.size()), stamp->vocab_size);
  // The same count with the tokens in another order gives the embedding's
  // rows other tokens.
  const std::uint32_t crc = content_crc32(*vocab_bytes);
  if (crc != stamp->vocab_crc32)
    throw TextDataError(vocab_path + " is not the vocabulary " + kPreparedJson + " was written with (crc32 " +
                        std::to_string(crc) + ", " + kPreparedJson + " says " + std::to_string(stamp->vocab_crc32) +
                        ": files of two preparations or an edited file); " + reprepare_hint(data_dir));
  if (static_cast<std::int64_t>(data.train.size()) != stamp->train_rows)
    mismatch(kTrainCsv, "rows", static_cast<std::int64_t>(data.train.size()), stamp->train_rows);
  if (static_cast<std::int64_t>(data.test.size()) != stamp->test_rows)
    mismatch(kTestCsv, "rows", static_cast<std::int64_t>(data.test.size()), stamp->test_rows);
  return data;
}

}  // namespace ddp::text
