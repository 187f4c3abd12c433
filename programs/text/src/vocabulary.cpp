#include "ddp/text/vocabulary.h"

#include "ddp/text/text_data_error.h"
#include "ddp/text/tokenizer.h"
#include "file_bytes.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <utility>

namespace ddp::text {

namespace {

// The prepared directory a vocab.txt path names, for the messages' hint.
std::string directory_of(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

constexpr const char* kPadToken = "<pad>";
constexpr const char* kUnkToken = "<unk>";

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (const char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) return false;
  return true;
}

std::string printable(std::string_view s) {
  std::string out;
  for (const char c : s.substr(0, 40)) {
    if (c >= 0x20 && c < 0x7f) {
      out += c;
    } else {
      static const char* hex = "0123456789abcdef";
      const auto u = static_cast<unsigned char>(c);
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    }
  }
  return out;
}

}  // namespace

void count_tokens(std::string_view text, TokenCounts& counts) {
  for_each_token(text, [&](std::string_view t) {
    ++counts.try_emplace(std::string(t), 0).first->second;
  });
}

Vocabulary::Vocabulary(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {
  ids_.reserve(tokens_.size());
  for (std::size_t i = 0; i < tokens_.size(); ++i) ids_.emplace(tokens_[i], static_cast<std::int32_t>(i));
}

Vocabulary Vocabulary::build(const TokenCounts& counts, std::int64_t min_count) {
  if (min_count < 1) throw std::invalid_argument("min_count " + std::to_string(min_count) + " must be >= 1");
  std::vector<std::pair<const std::string*, std::int64_t>> kept;
  for (const auto& [token, n] : counts)
    if (n >= min_count) kept.emplace_back(&token, n);
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
    if (a.second != b.second) return a.second > b.second;
    return *a.first < *b.first;  // std::string's < compares bytes as unsigned char
  });
  std::vector<std::string> tokens = {kPadToken, kUnkToken};
  tokens.reserve(kept.size() + 2);
  for (const auto& k : kept) tokens.push_back(*k.first);
  return Vocabulary(std::move(tokens));
}

Vocabulary Vocabulary::read(const std::string& path) {
  const std::string dir = directory_of(path);
  const auto data = detail::read_file_bytes(path, reprepare_hint(dir));
  if (!data)
    throw TextDataError(path + " not found; run `ddp-text --prepare_only --data_dir " + dir +
                        "` (or just ddp-text) to prepare it");
  return parse(*data, path);
}

Vocabulary Vocabulary::parse(const std::string& bytes, const std::string& path) {
  const std::string dir = directory_of(path);
  const auto fail = [&](std::size_t line, const std::string& what) {
    throw TextDataError(path + ":" + std::to_string(line) + ": " + what + "; " + reprepare_hint(dir));
  };
  if (bytes.empty()) fail(1, "empty file, expected <pad> on line 1");
  if (bytes.back() != '\n') fail(static_cast<std::size_t>(std::count(bytes.begin(), bytes.end(), '\n')) + 1,
                                 "the last line has no line end (the file is cut short)");
  std::vector<std::string> tokens;
  std::unordered_map<std::string, std::size_t> seen;
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    const std::size_t eol = bytes.find('\n', pos);
    const std::string_view tok(bytes.data() + pos, eol - pos);
    pos = eol + 1;
    const std::size_t line = tokens.size() + 1;  // 1-based, as an editor shows it
    if (line == 1 && tok != kPadToken) fail(line, "'" + printable(tok) + "' where <pad> (token id 0) belongs");
    if (line == 2 && tok != kUnkToken) fail(line, "'" + printable(tok) + "' where <unk> (token id 1) belongs");
    if (line > 2) {
      if (tok.empty()) fail(line, "an empty line");
      if (!is_token(tok)) fail(line, "'" + printable(tok) + "' is not a token (only a-z and 0-9)");
    }
    tokens.emplace_back(tok);
    const auto [it, inserted] = seen.emplace(tok, line);
    if (!inserted) fail(line, "'" + printable(tok) + "' again (first on line " + std::to_string(it->second) + ")");
  }
  if (tokens.size() < 2) fail(2, "<unk> (token id 1) missing");
  return Vocabulary(std::move(tokens));
}

std::string Vocabulary::serialize() const {
  std::string out;
  for (const auto& t : tokens_) {
    out += t;
    out += '\n';
  }
  return out;
}

std::int32_t Vocabulary::id(std::string_view token) const {
  const auto it = ids_.find(std::string(token));
  return it == ids_.end() ? kUnk : it->second;
}

}  // namespace ddp::text
