#include "ddp/text/wordnet_reader.h"

#include "ddp/text/text_data_error.h"
#include "file_bytes.h"

#include <string_view>

namespace ddp::text {

namespace {

constexpr const char* kFixWordNet =
    "the file is damaged: reinstall wordnet-base (apt-get install --reinstall wordnet-base) or pass another --wordnet_dir";

bool all_digits(std::string_view s) {
  for (const char c : s)
    if (c < '0' || c > '9') return false;
  return !s.empty();
}

std::string_view trim_ascii(std::string_view s) {
  const auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

// The next space-separated field of `rest` (consumed from it).
std::string_view next_field(std::string_view& rest) {
  const auto end = rest.find(' ');
  const std::string_view field = rest.substr(0, end);
  rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
  return field;
}

std::string read_whole(const std::string& path) {
  auto data = detail::read_file_bytes(path, "check --wordnet_dir");
  if (!data)
    throw TextDataError(path + " not found; install Debian's wordnet-base (apt-get install wordnet-base) "
                        "or pass --wordnet_dir");
  return std::move(*data);
}

}  // namespace

const std::array<WordNetSource, 4>& wordnet_sources() {
  static const std::array<WordNetSource, 4> sources = {
      {{"data.noun", 'n'}, {"data.verb", 'v'}, {"data.adj", 'a'}, {"data.adv", 'r'}}};
  return sources;
}

std::vector<WordNetRow> read_wordnet_file(const std::string& path, char letter) {
  const std::string text = read_whole(path);
  std::vector<WordNetRow> rows;
  rows.reserve(text.size() / 130);  // data.noun averages ~185 bytes a line
  std::size_t pos = 0;
  std::size_t line_no = 0;
  while (pos < text.size()) {
    const std::size_t eol = text.find('\n', pos);
    const std::string_view line(text.data() + pos, (eol == std::string::npos ? text.size() : eol) - pos);
    pos = eol == std::string::npos ? text.size() : eol + 1;
    ++line_no;
    if (line.substr(0, 2) == "  ") continue;  // license header
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    const auto bar = line.find('|');
    if (bar == std::string_view::npos)
      throw TextDataError(where + "no '|' before a gloss in this line; " + kFixWordNet);
    std::string_view rest = line.substr(0, bar);
    const std::string_view offset = next_field(rest);
    if (offset.size() != 8 || !all_digits(offset))
      throw TextDataError(where + "synset offset '" + std::string(offset) + "' is not 8 digits; " + kFixWordNet);
    const std::string_view lex = next_field(rest);
    const int lex_filenum = lex.size() == 2 && all_digits(lex) ? (lex[0] - '0') * 10 + (lex[1] - '0') : -1;
    if (lex_filenum < 0 || lex_filenum > 44)
      throw TextDataError(where + "lex_filenum '" + std::string(lex) + "' is not two digits in 00..44; " +
                          kFixWordNet);
    WordNetRow row;
    row.letter = letter;
    row.offset = std::string(offset);
    row.lex_filenum = lex_filenum;
    row.gloss = std::string(trim_ascii(line.substr(bar + 1)));
    rows.push_back(std::move(row));
  }
  if (rows.empty())
    throw TextDataError(path + ": holds no synset, only " + std::to_string(line_no) + " license header lines; " +
                        kFixWordNet);
  return rows;
}

}  // namespace ddp::text
