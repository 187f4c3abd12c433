#pragma once
// Helpers for text_unit_tests: synthetic WordNet data files (with the
// license header the real ones carry) and the one-line message of a
// TextDataError.

#include <functional>
#include <string>
#include <vector>

#include "ddp/text/prepare.h"
#include "test_support.h"

namespace ddp::text::test {

// The 29 license lines of a real data file, each starting with two spaces.
std::string license_header();

// One data-file line in wndb(5WN) format for a synset with one word.
std::string synset_line(const std::string& offset, const std::string& lex_filenum, char ss_type,
                        const std::string& word, const std::string& gloss);

// A WordNet directory with data.noun, data.verb, data.adj, data.adv, each the
// license header plus `lines` of that file (a file with no lines gets one
// made-up synset, so all four are valid).
struct SyntheticWordNet {
  std::vector<std::string> noun, verb, adj, adv;
};
void write_wordnet(const std::string& dir, const SyntheticWordNet& wn);
// A small valid one: a few synsets in each file, at least one in the test
// split, tokens that repeat (for min_count), commas and quotes in glosses.
SyntheticWordNet small_wordnet();

// A temp directory with small_wordnet() in wordnet/ and options that
// prepare it into text-data/ (nothing prepared yet); out(name) is a
// prepared file's path.
struct SmallWordNetDirs {
  ddp::test::TempDir tmp;
  PrepareOptions opts;
  SmallWordNetDirs();
  std::string out(const char* name) const;
};

// The message of the TextDataError f throws ("" when it throws none); FAILs
// the case when the message is not a single line.
std::string text_error_of(const std::function<void()>& f);

}  // namespace ddp::text::test
