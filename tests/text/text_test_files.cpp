#include "text_test_files.h"

#include <catch2/catch.hpp>

#include "ddp/text/split.h"
#include "ddp/text/text_data_error.h"
#include "test_support.h"

#include <cstdio>
#include <filesystem>

#include "ddp/text/prepared_stamp.h"

namespace ddp::text::test {

std::string license_header() {
  std::string h;
  for (int i = 1; i <= 29; ++i)
    h += "  " + std::to_string(i) + " Princeton University license line " + std::to_string(i) + "  \n";
  return h;
}

std::string synset_line(const std::string& offset, const std::string& lex_filenum, char ss_type,
                        const std::string& word, const std::string& gloss) {
  // synset_offset lex_filenum ss_type w_cnt word lex_id p_cnt [ptr...] | gloss
  return offset + " " + lex_filenum + " " + ss_type + " 01 " + word + " 0 001 @ 00001740 n 0000 | " + gloss + "  \n";
}

void write_wordnet(const std::string& dir, const SyntheticWordNet& wn) {
  const auto write = [&](const char* name, const std::vector<std::string>& lines, char ss, const char* lex) {
    std::string text = license_header();
    for (const auto& l : lines) text += l;
    if (lines.empty()) text += synset_line("00001740", lex, ss, "filler", "a made-up filler synset");
    ddp::test::write_file(dir + "/" + name, text);
  };
  write("data.noun", wn.noun, 'n', "03");
  write("data.verb", wn.verb, 'v', "29");
  write("data.adj", wn.adj, 'a', "00");
  write("data.adv", wn.adv, 'r', "02");
}

SyntheticWordNet small_wordnet() {
  // Consecutive offsets from 00001740 over the four files (30 nouns, 8 verbs,
  // 6 adjectives, 4 adverbs): n:00001741, n:00001756, n:00001767, v:00001774,
  // a:00001782 and r:00001785 fall in the test split (FNV-1a 64 mod 10 = 0,
  // computed with Python), the other 42 in train.
  SyntheticWordNet wn;
  int o = 1740;
  const auto next = [&o] {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08d", o++);
    return std::string(buf);
  };
  for (int i = 0; i < 30; ++i) {
    const std::string lex = i % 3 == 0 ? "05" : i % 3 == 1 ? "18" : "06";
    wn.noun.push_back(synset_line(next(), lex, 'n', "thing" + std::to_string(i),
                                  "a thing, with \"quotes\" and commas; number " + std::to_string(i % 4) +
                                      " of the Animal kind"));
  }
  for (int i = 0; i < 8; ++i)
    wn.verb.push_back(synset_line(next(), "38", 'v', "move" + std::to_string(i), "move from place to place"));
  for (int i = 0; i < 6; ++i)
    wn.adj.push_back(synset_line(next(), i % 2 ? "00" : "44", i % 2 ? 's' : 'a', "big" + std::to_string(i),
                                 "large in size; \"a big house\""));
  for (int i = 0; i < 4; ++i) wn.adv.push_back(synset_line(next(), "02", 'r', "fast", "quickly"));
  return wn;
}

std::string text_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const TextDataError& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find('\n') == std::string::npos);
    CHECK(!msg.empty());
    return msg;
  }
  return "";
}

SmallWordNetDirs::SmallWordNetDirs() {
  opts.wordnet_dir = tmp.file("wordnet");
  opts.data_dir = tmp.file("text-data");
  std::filesystem::create_directories(opts.wordnet_dir);
  write_wordnet(opts.wordnet_dir, small_wordnet());
}

std::string SmallWordNetDirs::out(const char* name) const { return prepared_path(opts.data_dir, name); }

}  // namespace ddp::text::test
