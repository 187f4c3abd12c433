// Loading a prepared directory: token ids, <unk>, empty texts, truncation,
// flattened offsets; one line for a missing or damaged prepared file.
#include <catch2/catch.hpp>

#include <filesystem>

#include "ddp/text/prepare.h"
#include "ddp/text/prepared_stamp.h"
#include "ddp/text/text_dataset.h"
#include "test_support.h"
#include "text_test_files.h"

using namespace ddp::text;
using ddp::test::read_file;
using ddp::test::TempDir;
using ddp::test::write_file;
using ddp::text::test::small_wordnet;
using ddp::text::test::text_error_of;
using ddp::text::test::write_wordnet;
namespace fs = std::filesystem;

namespace {

struct Prepared : ddp::text::test::SmallWordNetDirs {
  Prepared() { prepare_text_data(opts); }
  std::string hint() const {
    return "; delete " + opts.data_dir + " and run `ddp-text --prepare_only --data_dir " + opts.data_dir +
           "` to prepare it again";
  }
};

}  // namespace

TEST_CASE("dataset: ids of the tokens, <unk>, [<unk>] for no token, truncated to max_length", "[text][dataset]") {
  TempDir dir;
  write_file(dir.file("vocab.txt"), "<pad>\n<unk>\nthe\ncat\na\n");
  write_file(dir.file("t.csv"), "text,label\n\"The cat, a CAT\nand\",noun.act\nthe dog,noun.animal\n...,adj.ppl\n"
                                "a a a a the,verb.weather\n");
  const auto vocab = Vocabulary::read(dir.file("vocab.txt"));
  const auto split = load_split(dir.file("t.csv"), vocab, 4);
  REQUIRE(split.size() == 4);
  CHECK(split.offsets == std::vector<std::int64_t>{0, 4, 6, 7, 11});
  CHECK(split.tokens == std::vector<std::int32_t>{2, 3, 4, 3, /**/ 2, 1, /**/ 1, /**/ 4, 4, 4, 4});
  CHECK(split.labels == std::vector<std::uint8_t>{4, 5, 44, 43});
  CHECK(split.length(0) == 4);  // "and" cut off by max_length 4
  CHECK(split.length(2) == 1);
  CHECK_THROWS_AS(load_split(dir.file("t.csv"), vocab, 0), std::invalid_argument);
}

TEST_CASE("dataset: a prepared directory loads whole", "[text][dataset]") {
  Prepared p;
  const auto data = load_text_data(p.opts.data_dir, 64);
  CHECK(data.train.size() == 42);
  CHECK(data.test.size() == 6);
  CHECK(data.label_names.size() == 45);
  CHECK(data.vocab.token(0) == "<pad>");
  CHECK(data.train.offsets.size() == 43);
  CHECK(data.train.offsets.back() == static_cast<std::int64_t>(data.train.tokens.size()));
  for (const auto id : data.train.tokens) {
    CHECK(id >= 1);
    CHECK(id < static_cast<std::int32_t>(data.vocab.size()));
  }
}

TEST_CASE("dataset: a missing prepared file says what to run", "[text][dataset]") {
  Prepared p;
  for (const char* name : {kPreparedJson, kLabelsTxt, kVocabTxt, kTrainCsv, kTestCsv}) {
    INFO(name);
    const std::string keep = read_file(p.out(name));
    fs::remove(p.out(name));
    CHECK(text_error_of([&] { load_text_data(p.opts.data_dir, 64); }) ==
          p.out(name) + " not found; run `ddp-text --prepare_only --data_dir " + p.opts.data_dir +
              "` (or just ddp-text) to prepare it");
    write_file(p.out(name), keep);
  }
  CHECK_NOTHROW(load_text_data(p.opts.data_dir, 64));
}

TEST_CASE("dataset: a damaged prepared file is one line", "[text][dataset]") {
  Prepared p;
  SECTION("vocab.txt with a duplicate") {
    write_file(p.out(kVocabTxt), read_file(p.out(kVocabTxt)) + "thing\n");
    const std::string err = text_error_of([&] { load_text_data(p.opts.data_dir, 64); });
    CHECK(err.rfind(p.out(kVocabTxt) + ":", 0) == 0);
    CHECK(err.find(": 'thing' again (first on line ") != std::string::npos);
    CHECK(err.find(p.hint()) != std::string::npos);
  }
  SECTION("a CSV row with an unknown label") {
    write_file(p.out(kTestCsv), read_file(p.out(kTestCsv)) + "some text,noun.unicorn\n");
    CHECK(text_error_of([&] { load_text_data(p.opts.data_dir, 64); }) ==
          p.out(kTestCsv) + ":8: unknown label 'noun.unicorn' (not one of the 45 classes of labels.txt)" + p.hint());
  }
  SECTION("labels.txt out of order") {
    write_file(p.out(kLabelsTxt), "adj.pert\nadj.all\n");
    CHECK(text_error_of([&] { load_text_data(p.opts.data_dir, 64); }) ==
          p.out(kLabelsTxt) + ":1: 'adj.pert' where class 0 'adj.all' belongs (the 45 lexnames(5WN) classes in order, "
                              "one a line)" + p.hint());
  }
  SECTION("vocab.txt with two tokens swapped (same count, other ids)") {
    std::string vocab = read_file(p.out(kVocabTxt));
    const auto first = vocab.find("\n", vocab.find("<unk>")) + 1;  // the first corpus token
    const auto second = vocab.find('\n', first) + 1;
    const auto third = vocab.find('\n', second) + 1;
    vocab = vocab.substr(0, first) + vocab.substr(second, third - second) + vocab.substr(first, second - first) +
            vocab.substr(third);
    write_file(p.out(kVocabTxt), vocab);
    const std::string err = text_error_of([&] { load_text_data(p.opts.data_dir, 64); });
    CHECK(err.rfind(p.out(kVocabTxt) + " is not the vocabulary prepared.json was written with (crc32 ", 0) == 0);
    CHECK(err.find(": files of two preparations or an edited file)" + p.hint()) != std::string::npos);
  }
  SECTION("a train.csv of another preparation") {
    std::string csv = read_file(p.out(kTrainCsv));
    csv.erase(csv.rfind('\n', csv.size() - 2) + 1);  // drop the last row
    write_file(p.out(kTrainCsv), csv);
    CHECK(text_error_of([&] { load_text_data(p.opts.data_dir, 64); }) ==
          p.out(kTrainCsv) + " has 41 rows but prepared.json says 42 (files of two preparations)" + p.hint());
  }
  SECTION("a damaged stamp") {
    write_file(p.out(kPreparedJson), "not json");
    CHECK(text_error_of([&] { load_text_data(p.opts.data_dir, 64); }) ==
          p.out(kPreparedJson) + ": not a ddp-text-prepared-v2 stamp" + p.hint());
  }
}
