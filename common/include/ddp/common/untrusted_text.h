#pragma once
// Untrusted bytes (a worker's error message or stderr, a line of a damaged
// data file, a path given as $'caf\xe9') made safe to store as JSON and to
// show on a terminal. Pure functions, never throw; used by the error file
// (error_file.h), the launcher's failure report (report.h) and ddp-text's
// data errors (text_data_error.h), so every one of them treats such bytes
// the same way.
//  - visible_text also quotes control characters as \xNN: C0 (NUL cut a
//    C string such as what(); ESC[2J clears a terminal, BS and CR overwrite
//    what came before, BEL rings), DEL, and C1 (U+0080..U+009F, which some
//    terminals obey as 8-bit ESC/CSI; written as its two bytes). A tab
//    stays, as does all printable UTF-8; newlines stay or are quoted.
//  - A byte that is not part of a valid UTF-8 sequence (RFC 3629: no
//    overlong forms, no surrogates, nothing past U+10FFFF) becomes the four
//    characters \xNN, as Python's errors="backslashreplace" writes it: the
//    text stays valid UTF-8 (and so valid in JSON) and the byte stays
//    visible, which U+FFFD would hide.
//  - A backslash already in the text is not doubled: these strings are read
//    by people, and a path or a regex keeps its look; "\x41" may be either.

#include <cstddef>
#include <string>
#include <string_view>

namespace ddp {

// The length (1-4) of the valid UTF-8 sequence starting at s[i], 0 when the
// byte there does not start one (i < s.size()).
std::size_t utf8_sequence_length(std::string_view s, std::size_t i);

// `bytes` with every byte outside a valid UTF-8 sequence written as \xNN
// (lower-case hex); valid UTF-8, control characters included, unchanged.
std::string valid_utf8(std::string_view bytes);

enum class Newlines {
  Escape,  // '\n' as \x0a too: the text is one line (a message line, a data error)
  Keep,    // '\n' as it is: a message of several lines, a traceback
};

// valid_utf8, and every control character but tab (and '\n' with Keep) as
// \xNN, for showing untrusted bytes to a person.
std::string visible_text(std::string_view bytes, Newlines newlines = Newlines::Escape);

}  // namespace ddp
