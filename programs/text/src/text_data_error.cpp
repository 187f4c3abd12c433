#include "ddp/text/text_data_error.h"

#include "ddp/common/untrusted_text.h"

namespace ddp::text {

TextDataError::TextDataError(const std::string& what) : std::runtime_error(ddp::visible_text(what)) {}

std::string reprepare_hint(const std::string& data_dir) {
  return "delete " + data_dir + " and run `ddp-text --prepare_only --data_dir " + data_dir +
         "` to prepare it again";
}

}  // namespace ddp::text
