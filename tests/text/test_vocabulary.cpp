// The vocabulary: order (count descending, ties by bytes), min_count, <pad>
// and <unk>, vocab.txt round trip, one line for each damaged vocab.txt.
#include <catch2/catch.hpp>

#include <filesystem>

#include "ddp/text/vocabulary.h"
#include "test_support.h"
#include "text_test_files.h"

using namespace ddp::text;
using ddp::test::TempDir;
using ddp::test::write_file;
using ddp::text::test::text_error_of;

TEST_CASE("vocabulary: <pad>, <unk>, then count descending, ties by byte order, count >= min_count",
          "[text][vocab]") {
  TokenCounts counts;
  count_tokens("the cat and the dog", counts);
  count_tokens("The Dog, the cat; a 9 and a zebra", counts);
  count_tokens("9 cats", counts);
  // the 4, a 2, and 2, cat 2, dog 2, 9 2, zebra 1, cats 1
  CHECK(counts.at("the") == 4);
  CHECK(counts.at("dog") == 2);
  const auto v2 = Vocabulary::build(counts, 2);
  CHECK(v2.tokens() == std::vector<std::string>{"<pad>", "<unk>", "the", "9", "a", "and", "cat", "dog"});
  const auto v1 = Vocabulary::build(counts, 1);
  CHECK(v1.tokens() ==
        std::vector<std::string>{"<pad>", "<unk>", "the", "9", "a", "and", "cat", "dog", "cats", "zebra"});
  const auto v5 = Vocabulary::build(counts, 5);
  CHECK(v5.tokens() == std::vector<std::string>{"<pad>", "<unk>"});
  CHECK(v2.id("the") == 2);
  CHECK(v2.id("dog") == 7);
  CHECK(v2.id("zebra") == Vocabulary::kUnk);
  CHECK(v2.id("<pad>") == Vocabulary::kPad);  // the padding token is never produced by the tokenizer
  CHECK(v2.token(3) == "9");
  CHECK_THROWS_AS(Vocabulary::build(counts, 0), std::invalid_argument);
}

TEST_CASE("vocabulary: vocab.txt reads back the same", "[text][vocab]") {
  TempDir dir;
  TokenCounts counts;
  count_tokens("b b a a c d d d", counts);
  const auto v = Vocabulary::build(counts, 1);
  CHECK(v.serialize() == "<pad>\n<unk>\nd\na\nb\nc\n");
  write_file(dir.file("vocab.txt"), v.serialize());
  const auto r = Vocabulary::read(dir.file("vocab.txt"));
  CHECK(r.tokens() == v.tokens());
  CHECK(r.id("a") == 3);
  CHECK(r.id("e") == Vocabulary::kUnk);
}

TEST_CASE("vocabulary: each damaged vocab.txt is one line naming file:line", "[text][vocab]") {
  TempDir dir;
  const std::string path = dir.file("vocab.txt");
  const std::string hint = "; delete " + dir.path() + " and run `ddp-text --prepare_only --data_dir " + dir.path() +
                           "` to prepare it again";
  const auto error = [&](const std::string& content) {
    write_file(path, content);
    return text_error_of([&] { Vocabulary::read(path); });
  };
  CHECK(error("<unk>\n<pad>\nthe\n") == path + ":1: '<unk>' where <pad> (token id 0) belongs" + hint);
  CHECK(error("<pad>\nthe\n") == path + ":2: 'the' where <unk> (token id 1) belongs" + hint);
  CHECK(error("<pad>\n") == path + ":2: <unk> (token id 1) missing" + hint);
  CHECK(error("<pad>\n<unk>\nthe\ncat\nthe\n") == path + ":5: 'the' again (first on line 3)" + hint);
  CHECK(error("<pad>\n<unk>\nthe\n\ncat\n") == path + ":4: an empty line" + hint);
  CHECK(error("<pad>\n<unk>\nthe\ncat\r\n") == path + ":4: 'cat\\x0d' is not a token (only a-z and 0-9)" + hint);
  CHECK(error("<pad>\n<unk>\nThe\n") == path + ":3: 'The' is not a token (only a-z and 0-9)" + hint);
  CHECK(error("<pad>\n<unk>\nthe\nca") == path + ":4: the last line has no line end (the file is cut short)" + hint);
  CHECK(error("") == path + ":1: empty file, expected <pad> on line 1" + hint);
  std::filesystem::remove(path);
  CHECK(text_error_of([&] { Vocabulary::read(path); }) ==
        path + " not found; run `ddp-text --prepare_only --data_dir " + dir.path() + "` (or just ddp-text) to prepare it");
}
