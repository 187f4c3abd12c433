#pragma once
// TextDataError: every problem with ddp-text's data that the user can fix (a
// missing wordnet-base, a damaged WordNet file, a damaged or missing prepared
// file). Its message is the single line shown to the user as is: it names
// the file (and line, where there is one), what is wrong and what to do.
// Thrown by the readers and the preparation step of ddp_text_core; never
// caught inside the library. The message quotes bytes of a damaged file (and
// paths): it is made visible_text (ddp/common/untrusted_text.h) here, once,
// so a NUL cannot cut it short (what() is a C string), ESC and other control
// bytes reach no terminal raw, and bytes that are not UTF-8 show as \xNN.

#include <stdexcept>
#include <string>

namespace ddp::text {

class TextDataError : public std::runtime_error {
 public:
  explicit TextDataError(const std::string& what);
};

// What to do about a damaged prepared file in `data_dir`: "delete DIR and run
// `ddp-text --prepare_only --data_dir DIR` to prepare it again". Ends every
// error about the prepared files, since preparing again is always the fix.
std::string reprepare_hint(const std::string& data_dir);

}  // namespace ddp::text
