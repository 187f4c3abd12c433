#pragma once
// TextDataError: every problem with ddp-text's data that the user can fix (a
// missing wordnet-base, a damaged WordNet file, a damaged or missing prepared
// file). Its message is the single line shown to the user as is: it names
// the file (and line, where there is one), what is wrong and what to do.
// Thrown by the readers and the preparation step of ddp_text_core; never
// caught inside the library.

#include <stdexcept>
#include <string>

namespace ddp::text {

class TextDataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What to do about a damaged prepared file in `data_dir`: "delete DIR and run
// `ddp-text --prepare_only --data_dir DIR` to prepare it again". Ends every
// error about the prepared files, since preparing again is always the fix.
std::string reprepare_hint(const std::string& data_dir);

}  // namespace ddp::text
