#pragma once
// One JSON writer for the files the launcher and the worker write as JSON:
// the run summary, the event log, the trace, step stats and metrics.jsonl.
// Owns string escaping (as Python's json.dumps writes a str) and the commas
// between items. The caller owns the layout (separators, line breaks), so
// each file keeps the bytes its readers and tests know, and the numbers:
// a number goes in as its text (fixed_text, "%.8g"), never formatted here.
// Never parses JSON. Pure; any layer may use it.

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace ddp::json {

// How a string's non-ASCII text is written.
enum class Ascii {
  ensure,  // json.dumps(s): \uXXXX (surrogate pairs above U+FFFF, U+007F too);
           // bytes that are not UTF-8 as U+FFFD, as Python's errors="replace"
  utf8,    // json.dumps(s, ensure_ascii=False): the bytes pass as they are
};

// s as a JSON string, quotes included. Both modes write \" \\ \n \r \t \b \f
// and the other control characters as \u00XX, as Python does.
std::string quoted(std::string_view s, Ascii mode = Ascii::ensure);
void append_quoted(std::string& out, std::string_view s, Ascii mode = Ascii::ensure);

// The text around items of one object or array.
struct Layout {
  std::string_view comma = ", ";  // between items
  std::string_view colon = ": ";  // between a key and its value
  std::string_view lead = "";     // before every item: a line break and indent
  std::string_view close = "";    // before the closing bracket, when it holds items
};
inline constexpr Layout kPython{};           // json.dumps' default separators
inline constexpr Layout kCompact{",", ":"};  // separators=(",", ":")

// Writes one document. Containers opened without a layout take the writer's.
// Misuse (a value where a key is due, end() with nothing open) throws
// std::logic_error: these are the program's bugs, not the data's.
class Writer {
 public:
  explicit Writer(Ascii mode = Ascii::ensure, Layout layout = kPython);

  // Members of an object whose braces someone else writes: the event log's
  // more_metadata ("\"k\": v, ...").
  static Writer members(Ascii mode = Ascii::ensure, Layout layout = kPython);

  Writer& object();
  Writer& object(Layout layout);
  Writer& array();
  Writer& array(Layout layout);
  Writer& end();

  Writer& key(std::string_view k);
  Writer& string(std::string_view s);
  Writer& string_or_null(std::string_view s);  // "" is null
  template <class Int>
  Writer& integer(Int v) {
    static_assert(std::is_integral_v<Int> && !std::is_same_v<Int, bool>, "json::Writer::integer takes an integer");
    if constexpr (std::is_signed_v<Int>)
      return number(std::to_string(static_cast<long long>(v)));
    else
      return number(std::to_string(static_cast<unsigned long long>(v)));
  }
  Writer& boolean(bool v);
  Writer& null();
  Writer& number(std::string_view text);  // a number's text as the caller formatted it

  template <class Int>
  Writer& integer_or_null(const std::optional<Int>& v) {
    return v ? integer(*v) : null();
  }

  // JSON the caller already has: one value, or (inside an object) members
  // "\"k\": v, ...", written as one item. "" writes nothing.
  Writer& raw(std::string_view json);

  const std::string& text() const { return out_; }

 private:
  struct Level {
    Layout layout;
    bool object = false;
    bool any = false;       // an item was written
    bool want_value = false;  // a key was written, its value is due
  };
  void item();       // before a value (or a key): the comma and the lead
  Writer& open(char bracket, bool object, Layout layout);

  Ascii mode_;
  Layout layout_;
  std::vector<Level> open_;
  std::string out_;
};

}  // namespace ddp::json
