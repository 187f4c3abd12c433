#include "ddp/text/csv.h"

#include "ddp/text/text_data_error.h"
#include "file_bytes.h"

#include <filesystem>
#include <unordered_map>

namespace ddp::text {

void append_csv_field(std::string& out, std::string_view field) {
  if (field.find_first_of(",\"\r\n") == std::string_view::npos) {
    out += field;
    return;
  }
  out += '"';
  for (const char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
}

void append_csv_row(std::string& out, std::string_view text, std::string_view label) {
  append_csv_field(out, text);
  out += ',';
  append_csv_field(out, label);
  out += '\n';
}

namespace {

std::string dir_of(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// One RFC 4180 record parser over a whole file. Accepts "\n" and "\r\n"
// line ends (a spreadsheet may have rewritten the file), rejects everything
// RFC 4180 does not allow, which Python's csv.reader would read leniently.
class CsvParser {
 public:
  CsvParser(const std::string& path, std::string_view data) : path_(path), data_(data) {}

  bool at_end() const { return pos_ >= data_.size(); }
  std::size_t line() const { return line_; }

  // The fields of the next record; pos_ is then past its line end.
  std::vector<std::string> next_record() {
    record_line_ = line_;
    std::vector<std::string> fields;
    std::string field;
    while (true) {
      if (pos_ < data_.size() && data_[pos_] == '"') {
        ++pos_;
        while (true) {
          if (pos_ >= data_.size()) fail(record_line_, "a quoted field is not closed before the end of the file");
          const char c = data_[pos_++];
          if (c == '"') {
            if (pos_ < data_.size() && data_[pos_] == '"') {
              field += '"';
              ++pos_;
              continue;
            }
            break;
          }
          if (c == '\n') ++line_;
          field += c;
        }
        if (pos_ < data_.size() && data_[pos_] != ',' && data_[pos_] != '\n' &&
            !(data_[pos_] == '\r' && pos_ + 1 < data_.size() && data_[pos_ + 1] == '\n'))
          fail(line_, "a character after a closing quote (a field is quoted only as a whole)");
      } else {
        const std::size_t end = data_.find_first_of(",\n\"", pos_);
        const std::size_t stop = end == std::string_view::npos ? data_.size() : end;
        if (stop < data_.size() && data_[stop] == '"')
          fail(line_, "a '\"' inside an unquoted field (such a field must be quoted, with '\"' doubled)");
        std::string_view raw = data_.substr(pos_, stop - pos_);
        if (stop < data_.size() && data_[stop] == '\n' && !raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
        if (raw.find('\r') != std::string_view::npos) fail(line_, "a carriage return inside an unquoted field");
        field.assign(raw);
        pos_ = stop;
      }
      fields.push_back(std::move(field));
      field.clear();
      if (pos_ >= data_.size()) return fields;  // last record without a line end
      const char sep = data_[pos_];
      if (sep == ',') {
        ++pos_;
        continue;
      }
      if (sep == '\r') ++pos_;  // of "\r\n", checked above
      ++pos_;                   // '\n'
      ++line_;
      return fields;
    }
  }

  std::size_t record_line() const { return record_line_; }

  [[noreturn]] void fail(std::size_t line, const std::string& what) const {
    throw TextDataError(path_ + ":" + std::to_string(line) + ": " + what + "; " + reprepare_hint(dir_of(path_)));
  }

 private:
  const std::string& path_;
  std::string_view data_;
  std::size_t pos_ = 0;
  std::size_t line_ = 1;
  std::size_t record_line_ = 1;
};

}  // namespace

std::vector<LabeledText> read_labeled_csv(const std::string& path, const std::vector<std::string>& label_names) {
  const auto data = detail::read_file_bytes(path, reprepare_hint(dir_of(path)));
  if (!data)
    throw TextDataError(path + " not found; run `ddp-text --prepare_only --data_dir " + dir_of(path) +
                        "` (or just ddp-text) to prepare it");
  std::unordered_map<std::string_view, std::int32_t> label_index;
  for (std::size_t i = 0; i < label_names.size(); ++i)
    label_index.emplace(label_names[i], static_cast<std::int32_t>(i));

  CsvParser parser(path, *data);
  if (parser.at_end()) parser.fail(1, "empty file, expected the header line '" + std::string(kCsvHeader) + "'");
  const auto header = parser.next_record();
  if (header.size() != 2 || header[0] != "text" || header[1] != "label") {
    std::string got;
    for (std::size_t i = 0; i < header.size(); ++i) got += (i ? "," : "") + header[i];
    parser.fail(1, "header is '" + got.substr(0, 80) + "', expected '" + std::string(kCsvHeader) + "'");
  }
  std::vector<LabeledText> rows;
  rows.reserve(data->size() / 80);
  while (!parser.at_end()) {
    auto fields = parser.next_record();
    if (fields.size() != 2)
      parser.fail(parser.record_line(), std::to_string(fields.size()) + " field" + (fields.size() == 1 ? "" : "s") +
                                            ", expected 2 (text,label)");
    const auto it = label_index.find(fields[1]);
    if (it == label_index.end())
      parser.fail(parser.record_line(), "unknown label '" + fields[1].substr(0, 80) + "' (not one of the " +
                                            std::to_string(label_names.size()) + " classes of labels.txt)");
    rows.push_back(LabeledText{std::move(fields[0]), it->second});
  }
  return rows;
}

}  // namespace ddp::text
