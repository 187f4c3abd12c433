#pragma once
// train.csv / test.csv: RFC 4180 with '\n' line ends, the header line
// `text,label`, then one record per row: the text and the class NAME
// (lexnames.h). A field is quoted iff it holds ',', '"', '\r' or '\n';
// inside quotes '"' is doubled. Python's csv.reader reads back exactly the
// same fields. The writer appends to a string (the caller writes the file
// atomically); the reader reads a whole file and throws TextDataError, one
// line naming file:line (the line a record starts on), for an unterminated
// quote, a stray '"', a wrong number of fields, an unknown label or a
// missing header.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::text {

constexpr std::string_view kCsvHeader = "text,label";

// Appends `field`, quoted when it must be.
void append_csv_field(std::string& out, std::string_view field);
// Appends "text,label\n" (both fields escaped as above).
void append_csv_row(std::string& out, std::string_view text, std::string_view label);

struct LabeledText {
  std::string text;
  std::int32_t label = 0;  // index into the label names
};

// Reads `path`: the header must be `text,label`, every record two fields, and
// every label one of `label_names` (stored as its index). A missing file is a
// TextDataError saying to run `ddp-text --prepare_only --data_dir <its dir>`.
std::vector<LabeledText> read_labeled_csv(const std::string& path, const std::vector<std::string>& label_names);

}  // namespace ddp::text
