#pragma once
// ddp-text's preparation step (the seeds' `process`): reads the four WordNet
// data files (wordnet_reader.h) from wordnet_dir, splits the synsets
// (split.h), writes train.csv and test.csv (csv.h), labels.txt, vocab.txt
// built from the train split only (vocabulary.h) and, last, the stamp
// prepared.json (prepared_stamp.h) into data_dir. Every file is written
// atomically and the old stamp is removed first, so an interrupted
// preparation never leaves a stamp over files it does not describe.
// Up to date iff the stamp parses, its format and min_count match, its
// sources are data.noun, data.verb, data.adj, data.adv with the size and
// mtime they have now, and the other four files exist. Not safe to run twice
// at once on one data_dir: ddp-text's rank 0 prepares, the others wait.
// Throws TextDataError (one line) on bad or missing input and unwritable
// output.

#include <cstdint>
#include <iosfwd>
#include <string>

namespace ddp::text {

struct PrepareOptions {
  std::string wordnet_dir = "/usr/share/wordnet";
  std::string data_dir = "text-data";
  std::int64_t min_count = 2;  // >= 1
};

struct PrepareResult {
  bool prepared = false;  // false: it was up to date, the counts are the stamp's
  std::int64_t train_rows = 0;
  std::int64_t test_rows = 0;
  std::int64_t vocab_size = 0;  // with <pad> and <unk>
  double seconds = 0;           // spent preparing (0 when up to date)
};

// Why data_dir is not up to date for `opts` ("" when it is), e.g.
// "data.noun changed", "min count was 2", "no prepared.json".
std::string why_not_up_to_date(const PrepareOptions& opts);
bool is_up_to_date(const PrepareOptions& opts);

// Prepares data_dir (creating it) from wordnet_dir, whether or not it is up to date.
PrepareResult prepare_text_data(const PrepareOptions& opts);

// Prepares unless up to date, and logs one line either way:
//   "prepared text-data from /usr/share/wordnet (no prepared.json): 105669 train, 11990 test rows,
//    vocabulary 33185 (min count 2) in 1.2 s"
//   "text-data is up to date: 105669 train, 11990 test rows, vocabulary 33185 (min count 2)
//    from /usr/share/wordnet"
PrepareResult ensure_prepared(const PrepareOptions& opts, std::ostream& log);

}  // namespace ddp::text
