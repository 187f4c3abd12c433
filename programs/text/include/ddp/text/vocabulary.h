#pragma once
// The vocabulary of ddp-text: token id i = line i of vocab.txt. Id 0 is
// `<pad>` (the padding of a batch), id 1 `<unk>` (any token not in the
// vocabulary), then every token of the TRAIN split counted at least
// min_count times, by count descending, ties by byte order ascending.
// vocab.txt is one token per line, each line ended by '\n'. Built once by
// the preparation step (prepare.h), read by every rank (text_dataset.h);
// reading checks the file and throws TextDataError (one line, file:line).

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ddp::text {

// Token -> number of occurrences.
using TokenCounts = std::unordered_map<std::string, std::int64_t>;

// Adds the tokens of `text` (tokenizer.h) to `counts`.
void count_tokens(std::string_view text, TokenCounts& counts);

class Vocabulary {
 public:
  static constexpr std::int32_t kPad = 0;
  static constexpr std::int32_t kUnk = 1;

  // <pad>, <unk>, then the tokens with count >= min_count (min_count >= 1),
  // ordered as above.
  static Vocabulary build(const TokenCounts& counts, std::int64_t min_count);
  // Reads vocab.txt: line 0 must be <pad>, line 1 <unk>, every other line a
  // token of [a-z0-9]+ seen once. Throws TextDataError.
  static Vocabulary read(const std::string& path);
  // The same checks on vocab.txt's bytes, read already; `path` names the
  // file in the messages.
  static Vocabulary parse(const std::string& bytes, const std::string& path);

  // The content of vocab.txt.
  std::string serialize() const;

  // The id of `token`, kUnk when absent.
  std::int32_t id(std::string_view token) const;
  const std::string& token(std::int32_t id) const { return tokens_.at(static_cast<std::size_t>(id)); }
  std::size_t size() const { return tokens_.size(); }
  const std::vector<std::string>& tokens() const { return tokens_; }

 private:
  explicit Vocabulary(std::vector<std::string> tokens);
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, std::int32_t> ids_;
};

}  // namespace ddp::text
