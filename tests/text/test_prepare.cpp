// The preparation step on a synthetic WordNet: the files it writes, the
// split and vocabulary rules, the up-to-date rule (skip; re-prepare on a
// changed source, a changed min_count, a missing output, a damaged stamp),
// identical bytes on every run, and the real /usr/share/wordnet.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <utility>
#include <vector>
#include <sstream>

#include "ddp/text/csv.h"
#include "ddp/text/lexnames.h"
#include "ddp/text/prepare.h"
#include "ddp/text/prepared_stamp.h"
#include "ddp/text/split.h"
#include "ddp/text/text_dataset.h"
#include "ddp/text/tokenizer.h"
#include "ddp/text/wordnet_reader.h"
#include "test_skip.h"
#include "test_support.h"
#include "text_test_files.h"

using namespace ddp::text;
using ddp::test::read_file;
using ddp::test::TempDir;
using ddp::test::write_file;
using ddp::text::test::small_wordnet;
using ddp::text::test::synset_line;
using ddp::text::test::text_error_of;
using ddp::text::test::write_wordnet;
namespace fs = std::filesystem;

namespace {

struct Fixture : ddp::text::test::SmallWordNetDirs {
  std::string ensure() {
    std::ostringstream log;
    ensure_prepared(opts, log);
    return log.str();
  }
};

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

TEST_CASE("prepare: writes the split, labels, vocabulary of the train split and the stamp", "[text][prepare]") {
  Fixture f;
  const auto result = prepare_text_data(f.opts);
  CHECK(result.prepared);

  // Expected rows, from the reader and the split rule, in file then line order.
  std::string train = "text,label\n", test = "text,label\n";
  std::int64_t n_train = 0, n_test = 0;
  TokenCounts counts;
  std::set<std::string> test_only_tokens;
  for (const auto& src : wordnet_sources()) {
    for (const auto& row : read_wordnet_file(f.opts.wordnet_dir + "/" + src.file, src.letter)) {
      const bool t = is_test(split_key(src.letter, row.offset));
      append_csv_row(t ? test : train, row.gloss, lexname(row.lex_filenum));
      (t ? n_test : n_train) += 1;
      if (!t) count_tokens(row.gloss, counts);
    }
  }
  REQUIRE(n_test == 6);  // n:00001741, n:00001756, n:00001767, v:00001774, a:00001782, r:00001785
  CHECK(read_file(f.out(kTrainCsv)) == train);
  CHECK(read_file(f.out(kTestCsv)) == test);
  CHECK(result.train_rows == n_train);
  CHECK(result.test_rows == n_test);
  CHECK(read_file(f.out(kVocabTxt)) == Vocabulary::build(counts, 2).serialize());
  CHECK(result.vocab_size == static_cast<std::int64_t>(Vocabulary::build(counts, 2).size()));
  std::string labels;
  for (const auto& l : lexnames()) labels += l + "\n";
  CHECK(read_file(f.out(kLabelsTxt)) == labels);
  CHECK(labels.substr(0, 25) == "adj.all\nadj.pert\nadv.all\n");

  const auto stamp = parse_stamp(read_file(f.out(kPreparedJson)));
  REQUIRE(stamp);
  CHECK(stamp->format == "ddp-text-prepared-v2");
  CHECK(stamp->min_count == 2);
  REQUIRE(stamp->sources.size() == 4);
  CHECK(stamp->sources[0].file == "data.noun");
  CHECK(stamp->sources[3].file == "data.adv");
  CHECK(stamp->sources[0].size == static_cast<std::int64_t>(fs::file_size(f.opts.wordnet_dir + "/data.noun")));
  CHECK(stamp->train_rows == n_train);
  CHECK(stamp->test_rows == n_test);
  CHECK(stamp->vocab_size == result.vocab_size);
  CHECK(stamp->vocab_crc32 == content_crc32(read_file(f.out(kVocabTxt))));
  CHECK(content_crc32("123456789") == 0xcbf43926u);  // CRC-32's check value, as Python's zlib.crc32
  CHECK(stamp->wordnet_dir == f.opts.wordnet_dir);
  // Numbers as numbers, as the spec writes them.
  CHECK(read_file(f.out(kPreparedJson)).find("\"min_count\": 2, \"sources\": [{\"file\": \"data.noun\", \"size\": ") !=
        std::string::npos);
}

TEST_CASE("prepare: the vocabulary comes from the train split only", "[text][prepare]") {
  Fixture f;
  auto wn = small_wordnet();
  // n:00001741 (the second noun) is in the test split: give it a word seen nowhere else, twice.
  wn.noun[1] = synset_line("00001741", "05", 'n', "x", "zyzzyva zyzzyva");
  wn.noun[2] = synset_line("00001742", "05", 'n', "x", "quokka quokka");  // train
  write_wordnet(f.opts.wordnet_dir, wn);
  prepare_text_data(f.opts);
  const auto vocab = Vocabulary::read(f.out(kVocabTxt));
  CHECK(vocab.id("zyzzyva") == Vocabulary::kUnk);
  CHECK(vocab.id("quokka") != Vocabulary::kUnk);
  CHECK(read_file(f.out(kTestCsv)).find("zyzzyva zyzzyva,noun.animal\n") != std::string::npos);
}

TEST_CASE("prepare: up to date after a run, so the second run skips", "[text][prepare][uptodate]") {
  Fixture f;
  CHECK_FALSE(is_up_to_date(f.opts));
  CHECK(why_not_up_to_date(f.opts) == "no prepared.json");
  const std::string first = f.ensure();
  INFO(first);
  CHECK(starts_with(first, "prepared " + f.opts.data_dir + " from " + f.opts.wordnet_dir + " (no prepared.json): "));
  CHECK(is_up_to_date(f.opts));
  const auto mtime = fs::last_write_time(f.out(kTrainCsv));
  std::ostringstream log;
  const auto second = ensure_prepared(f.opts, log);
  INFO(log.str());
  CHECK_FALSE(second.prepared);
  CHECK(starts_with(log.str(), f.opts.data_dir + " is up to date: "));
  CHECK(second.train_rows + second.test_rows == 48);
  CHECK(fs::last_write_time(f.out(kTrainCsv)) == mtime);
}

TEST_CASE("prepare: a touched source, another min_count, a missing output or a bad stamp prepares again",
          "[text][prepare][uptodate]") {
  Fixture f;
  f.ensure();
  REQUIRE(is_up_to_date(f.opts));
  SECTION("a source touched") {
    const std::string verb = f.opts.wordnet_dir + "/data.verb";
    fs::last_write_time(verb, fs::last_write_time(verb) + std::chrono::seconds(1));
    CHECK(why_not_up_to_date(f.opts) == "data.verb changed");
    CHECK(starts_with(f.ensure(), "prepared " + f.opts.data_dir + " from " + f.opts.wordnet_dir + " (data.verb changed): "));
  }
  SECTION("a source of another size, same mtime") {
    const std::string adv = f.opts.wordnet_dir + "/data.adv";
    const auto mtime = fs::last_write_time(adv);
    write_file(adv, read_file(adv) + synset_line("00009999", "02", 'r', "slowly", "not fast"));
    fs::last_write_time(adv, mtime);
    CHECK(why_not_up_to_date(f.opts) == "data.adv changed");
  }
  SECTION("another min_count") {
    f.opts.min_count = 3;
    CHECK(why_not_up_to_date(f.opts) == "min count was 2");
    CHECK(starts_with(f.ensure(), "prepared " + f.opts.data_dir + " from " + f.opts.wordnet_dir + " (min count was 2): "));
    CHECK(parse_stamp(read_file(f.out(kPreparedJson)))->min_count == 3);
    CHECK(is_up_to_date(f.opts));
  }
  SECTION("a deleted output") {
    for (const char* name : {kTrainCsv, kTestCsv, kLabelsTxt, kVocabTxt}) {
      fs::remove(f.out(name));
      CHECK(why_not_up_to_date(f.opts) == std::string(name) + " missing");
      f.ensure();
      CHECK(fs::exists(f.out(name)));
      CHECK(is_up_to_date(f.opts));
    }
  }
  SECTION("a vocabulary edited after preparation: two tokens swapped, same size and mtime") {
    const std::string original = read_file(f.out(kVocabTxt));
    const auto mtime = fs::last_write_time(f.out(kVocabTxt));
    std::istringstream lines(original);
    std::vector<std::string> tokens;
    for (std::string t; std::getline(lines, t);) tokens.push_back(t);
    REQUIRE(tokens.size() >= 4);  // <pad>, <unk>, then the corpus tokens
    std::swap(tokens[2], tokens[3]);
    std::string swapped;
    for (const auto& t : tokens) swapped += t + "\n";
    REQUIRE(swapped.size() == original.size());
    write_file(f.out(kVocabTxt), swapped);
    fs::last_write_time(f.out(kVocabTxt), mtime);
    CHECK(why_not_up_to_date(f.opts) == "vocab.txt is not the one prepared.json was written with");
    CHECK(starts_with(f.ensure(), "prepared " + f.opts.data_dir + " from " + f.opts.wordnet_dir +
                                      " (vocab.txt is not the one prepared.json was written with): "));
    CHECK(read_file(f.out(kVocabTxt)) == original);
    CHECK(is_up_to_date(f.opts));
  }
  SECTION("a damaged stamp") {
    write_file(f.out(kPreparedJson), "{\"format\": \"ddp-text-prepared-v2\", \"min_count\": ");
    CHECK(why_not_up_to_date(f.opts) == "prepared.json damaged");
    write_file(f.out(kPreparedJson), std::string(100000, '['));
    CHECK(why_not_up_to_date(f.opts) == "prepared.json damaged");
    f.ensure();
    CHECK(is_up_to_date(f.opts));
  }
  SECTION("a stamp of another format") {
    std::string json = read_file(f.out(kPreparedJson));
    json.replace(json.find("-v2"), 3, "-v0");
    write_file(f.out(kPreparedJson), json);
    CHECK(why_not_up_to_date(f.opts) == "format was ddp-text-prepared-v0");
  }
  SECTION("a source gone") {
    fs::remove(f.opts.wordnet_dir + "/data.adj");
    CHECK(why_not_up_to_date(f.opts) == "data.adj missing");
    CHECK(text_error_of([&] { f.ensure(); }) ==
          f.opts.wordnet_dir + "/data.adj not found; install Debian's wordnet-base (apt-get install wordnet-base) "
                               "or pass --wordnet_dir");
  }
}

TEST_CASE("prepare: a preparation that fails part way leaves no stamp over the files it did not write",
          "[text][prepare][uptodate]") {
  Fixture f;
  f.ensure();
  // test.csv cannot be replaced (a non-empty directory stands in its place),
  // while vocab.txt (written before it) is rewritten for min_count 3.
  fs::remove(f.out(kTestCsv));
  fs::create_directories(f.out(kTestCsv) + "/blocker");
  f.opts.min_count = 3;
  const std::string err = text_error_of([&] { prepare_text_data(f.opts); });
  CHECK(starts_with(err, "cannot write " + f.out(kTestCsv) + ": "));
  CHECK(err.find("; check --data_dir") != std::string::npos);
  CHECK_FALSE(is_up_to_date(f.opts));
  f.opts.min_count = 2;  // the old stamp's min_count: its vocab.txt is gone, so it must not count as up to date
  CHECK_FALSE(is_up_to_date(f.opts));
  CHECK(why_not_up_to_date(f.opts) == "no prepared.json");
}

TEST_CASE("prepare: the same bytes on every run", "[text][prepare]") {
  Fixture f;
  prepare_text_data(f.opts);
  PrepareOptions again = f.opts;
  again.data_dir = f.tmp.file("again");
  prepare_text_data(again);
  for (const char* name : {kTrainCsv, kTestCsv, kLabelsTxt, kVocabTxt, kPreparedJson}) {
    INFO(name);
    CHECK(read_file(f.out(name)) == read_file(prepared_path(again.data_dir, name)));
    CHECK(!read_file(f.out(name)).empty());
  }
}

TEST_CASE("prepare: bad options and an unwritable --data_dir are one line", "[text][prepare]") {
  Fixture f;
  f.opts.min_count = 0;
  CHECK(text_error_of([&] { prepare_text_data(f.opts); }) == "--min_count 0 must be at least 1");
  f.opts.min_count = 2;
  write_file(f.tmp.file("a-file"), "x");
  f.opts.data_dir = f.tmp.file("a-file");
  CHECK(starts_with(text_error_of([&] { prepare_text_data(f.opts); }), "cannot create --data_dir " + f.opts.data_dir + ": "));
}

TEST_CASE("prepare: the real WordNet of wordnet-base", "[text][prepare][wordnet-base]") {
  PrepareOptions opts;  // wordnet_dir /usr/share/wordnet
  if (!fs::exists(opts.wordnet_dir + "/data.noun")) DDP_SKIP("no " + opts.wordnet_dir + " (apt-get install wordnet-base)");
  TempDir tmp;
  opts.data_dir = tmp.file("text-data");
  std::ostringstream log;
  const auto result = ensure_prepared(opts, log);
  WARN(log.str());
  CHECK(result.train_rows + result.test_rows == 117659);
  const double test_share = static_cast<double>(result.test_rows) / (result.train_rows + result.test_rows);
  CHECK(test_share > 0.09);
  CHECK(test_share < 0.11);
  const auto start = std::chrono::steady_clock::now();
  const auto data = load_text_data(opts.data_dir, 64);
  WARN("load_text_data (vocab, labels, both splits): "
       << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() << " s");
  CHECK(static_cast<std::int64_t>(data.train.size()) == result.train_rows);
  CHECK(static_cast<std::int64_t>(data.vocab.size()) == result.vocab_size);
  std::set<int> classes(data.train.labels.begin(), data.train.labels.end());
  CHECK(classes.size() == 45);
  std::int64_t longest = 0;
  for (std::size_t i = 0; i < data.train.size(); ++i) longest = std::max(longest, data.train.length(i));
  CHECK(longest == 64);  // the longest gloss has 82 tokens, truncated to 64

  // The same files as an independent Python version of the spec writes.
  if (!fs::exists("/usr/bin/python3")) DDP_SKIP("no /usr/bin/python3 to compare the prepared files with");
  const auto py = ddp::test::run({"/usr/bin/python3", ddp::test::source_path("tests/text/reference_prepare.py"),
                                  opts.wordnet_dir, tmp.file("python"), "2"},
                                 {}, 120);
  INFO(py.output);
  REQUIRE(py.exit_code == 0);
  for (const char* name : {kTrainCsv, kTestCsv, kLabelsTxt, kVocabTxt}) {
    const std::string ours = read_file(prepared_path(opts.data_dir, name));
    const std::string theirs = read_file(prepared_path(tmp.file("python"), name));
    const auto at = static_cast<std::size_t>(
        std::mismatch(ours.begin(), ours.end(), theirs.begin(), theirs.end()).first - ours.begin());
    INFO(name << ": " << ours.size() << " bytes, Python's " << theirs.size() << "; first difference at byte " << at
              << ": '" << ours.substr(at, 60) << "' vs '" << theirs.substr(std::min(at, theirs.size()), 60) << "'");
    CHECK(ours.size() == theirs.size());
    CHECK(at == ours.size());
  }
}
