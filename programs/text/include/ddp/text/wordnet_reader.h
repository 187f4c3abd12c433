#pragma once
// Reads one WordNet data file (data.noun, data.verb, data.adj, data.adv;
// format in wndb(5WN)) into one row per synset: its offset, lexicographer
// file number (= class, lexnames.h) and gloss. Only those three fields are
// read: the words, pointers and frames between them are skipped. Lines that
// begin with two spaces are the license header and are skipped. Never
// prints; every problem is a TextDataError naming file:line.

#include <array>
#include <string>
#include <vector>

namespace ddp::text {

struct WordNetRow {
  char letter = 'n';    // of the file it came from: n, v, a, r
  std::string offset;   // synset_offset, the 8 digits as written
  int lex_filenum = 0;  // 0..44
  std::string gloss;    // after the line's first '|', ASCII whitespace trimmed at both ends
};

// The four data files in the order they are read, with their letters:
// data.noun n, data.verb v, data.adj a, data.adv r.
struct WordNetSource {
  const char* file;
  char letter;
};
const std::array<WordNetSource, 4>& wordnet_sources();

// Reads `path`, tagging each row with `letter`. Throws TextDataError when the
// file is missing or unreadable, when a line has no '|', an offset that is not
// 8 digits, a lex_filenum that is not two digits in 00..44, or when the file
// holds no synset at all.
std::vector<WordNetRow> read_wordnet_file(const std::string& path, char letter);

}  // namespace ddp::text
