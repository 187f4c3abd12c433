#include "ddp/text/prepare.h"

#include "ddp/common/atomic_file.h"
#include "ddp/text/csv.h"
#include "ddp/text/lexnames.h"
#include "ddp/text/prepared_stamp.h"
#include "ddp/text/split.h"
#include "ddp/text/text_data_error.h"
#include "ddp/text/vocabulary.h"
#include "ddp/text/wordnet_reader.h"
#include "file_bytes.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <sys/stat.h>

namespace ddp::text {

namespace {

std::optional<SourceStamp> stat_source(const std::string& wordnet_dir, const std::string& file) {
  struct stat st {};
  if (::stat(prepared_path(wordnet_dir, file).c_str(), &st) != 0) return std::nullopt;
  return SourceStamp{file, static_cast<std::int64_t>(st.st_size),
                     static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec};
}

// The stamp of an up-to-date data_dir, or the reason it is not.
std::optional<PreparedStamp> read_current_stamp(const PrepareOptions& opts, std::string& why) {
  const std::string stamp_path = prepared_path(opts.data_dir, kPreparedJson);
  std::optional<std::string> json;
  try {
    json = detail::read_file_bytes(stamp_path, "");
  } catch (const TextDataError&) {
    why = std::string(kPreparedJson) + " unreadable";
    return std::nullopt;
  }
  if (!json) {
    why = std::string("no ") + kPreparedJson;
    return std::nullopt;
  }
  auto stamp = parse_stamp(*json);
  if (!stamp) {
    why = std::string(kPreparedJson) + " damaged";
    return std::nullopt;
  }
  if (stamp->format != kPreparedFormat) {
    why = "format was " + stamp->format.substr(0, 40);
    return std::nullopt;
  }
  if (stamp->min_count != opts.min_count) {
    why = "min count was " + std::to_string(stamp->min_count);
    return std::nullopt;
  }
  const auto& sources = wordnet_sources();
  if (stamp->sources.size() != sources.size()) {
    why = std::string(kPreparedJson) + " lists " + std::to_string(stamp->sources.size()) + " sources";
    return std::nullopt;
  }
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const auto now = stat_source(opts.wordnet_dir, sources[i].file);
    const auto& then = stamp->sources[i];
    if (then.file != sources[i].file) {
      why = std::string(kPreparedJson) + " lists " + then.file.substr(0, 40) + " for " + sources[i].file;
      return std::nullopt;
    }
    if (!now) {
      why = std::string(sources[i].file) + " missing";
      return std::nullopt;
    }
    if (now->size != then.size || now->mtime_ns != then.mtime_ns) {
      why = std::string(sources[i].file) + " changed";
      return std::nullopt;
    }
  }
  for (const char* name : {kTrainCsv, kTestCsv, kLabelsTxt, kVocabTxt}) {
    struct stat st {};
    if (::stat(prepared_path(opts.data_dir, name).c_str(), &st) != 0) {
      why = std::string(name) + " missing";
      return std::nullopt;
    }
  }
  // Its tokens' order is the embedding's rows: an edit that keeps the size
  // (two tokens swapped) is not up to date.
  std::optional<std::string> vocab;
  try {
    vocab = detail::read_file_bytes(prepared_path(opts.data_dir, kVocabTxt), "");
  } catch (const TextDataError&) {
  }
  if (!vocab || content_crc32(*vocab) != stamp->vocab_crc32) {
    why = std::string(kVocabTxt) + " is not the one " + kPreparedJson + " was written with";
    return std::nullopt;
  }
  why.clear();
  return stamp;
}

void write_prepared(const std::string& data_dir, const char* name, const std::string& content) {
  const std::string path = prepared_path(data_dir, name);
  try {
    ddp::write_file_atomically(path, content);
  } catch (const ddp::AtomicWriteError& e) {
    throw TextDataError(std::string("cannot write ") + path + ": " + e.what() + "; check --data_dir");
  }
}

std::string format_seconds(double s) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << s;
  return out.str();
}

}  // namespace

std::string why_not_up_to_date(const PrepareOptions& opts) {
  std::string why;
  read_current_stamp(opts, why);
  return why;
}

bool is_up_to_date(const PrepareOptions& opts) { return why_not_up_to_date(opts).empty(); }

PrepareResult prepare_text_data(const PrepareOptions& opts) {
  const auto start = std::chrono::steady_clock::now();
  if (opts.min_count < 1)
    throw TextDataError("--min_count " + std::to_string(opts.min_count) + " must be at least 1");

  PreparedStamp stamp;
  stamp.min_count = opts.min_count;
  stamp.wordnet_dir = opts.wordnet_dir;
  std::string train_csv, test_csv;
  train_csv.reserve(16u << 20);
  test_csv.reserve(2u << 20);
  train_csv.append(kCsvHeader).append("\n");
  test_csv.append(kCsvHeader).append("\n");
  TokenCounts counts;
  counts.reserve(1u << 17);
  for (const auto& source : wordnet_sources()) {
    const std::string path = prepared_path(opts.wordnet_dir, source.file);
    // Stat before reading: a file replaced while it is read then differs from
    // its stamp and is prepared again next time.
    const auto st = stat_source(opts.wordnet_dir, source.file);
    const auto rows = read_wordnet_file(path, source.letter);
    if (!st) throw TextDataError(path + " appeared while it was read; run again");
    stamp.sources.push_back(*st);
    for (const auto& row : rows) {
      const bool test = is_test(split_key(row.letter, row.offset));
      append_csv_row(test ? test_csv : train_csv, row.gloss, lexname(row.lex_filenum));
      if (test) {
        ++stamp.test_rows;
      } else {
        ++stamp.train_rows;
        count_tokens(row.gloss, counts);
      }
    }
  }
  const Vocabulary vocab = Vocabulary::build(counts, opts.min_count);
  stamp.vocab_size = static_cast<std::int64_t>(vocab.size());
  const std::string vocab_txt = vocab.serialize();
  stamp.vocab_crc32 = content_crc32(vocab_txt);

  std::error_code ec;
  std::filesystem::create_directories(opts.data_dir, ec);
  if (ec) throw TextDataError("cannot create --data_dir " + opts.data_dir + ": " + ec.message());
  const std::string stamp_path = prepared_path(opts.data_dir, kPreparedJson);
  if (std::remove(stamp_path.c_str()) != 0 && errno != ENOENT)
    throw TextDataError("cannot remove " + stamp_path + ": " + std::strerror(errno) + "; check --data_dir");
  std::string labels;
  for (const auto& name : lexnames()) labels.append(name).append("\n");
  write_prepared(opts.data_dir, kLabelsTxt, labels);
  write_prepared(opts.data_dir, kVocabTxt, vocab_txt);
  write_prepared(opts.data_dir, kTrainCsv, train_csv);
  write_prepared(opts.data_dir, kTestCsv, test_csv);
  write_prepared(opts.data_dir, kPreparedJson, serialize_stamp(stamp));

  PrepareResult result;
  result.prepared = true;
  result.train_rows = stamp.train_rows;
  result.test_rows = stamp.test_rows;
  result.vocab_size = stamp.vocab_size;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

PrepareResult ensure_prepared(const PrepareOptions& opts, std::ostream& log) {
  std::string why;
  if (const auto stamp = read_current_stamp(opts, why)) {
    log << opts.data_dir << " is up to date: " << stamp->train_rows << " train, " << stamp->test_rows
        << " test rows, vocabulary " << stamp->vocab_size << " (min count " << stamp->min_count << ") from "
        << stamp->wordnet_dir << std::endl;
    PrepareResult result;
    result.train_rows = stamp->train_rows;
    result.test_rows = stamp->test_rows;
    result.vocab_size = stamp->vocab_size;
    return result;
  }
  const PrepareResult result = prepare_text_data(opts);
  log << "prepared " << opts.data_dir << " from " << opts.wordnet_dir << " (" << why << "): " << result.train_rows
      << " train, " << result.test_rows << " test rows, vocabulary " << result.vocab_size << " (min count "
      << opts.min_count << ") in " << format_seconds(result.seconds) << " s" << std::endl;
  return result;
}

}  // namespace ddp::text
