#include "ddp/text/text_data_error.h"

namespace ddp::text {

std::string reprepare_hint(const std::string& data_dir) {
  return "delete " + data_dir + " and run `ddp-text --prepare_only --data_dir " + data_dir +
         "` to prepare it again";
}

}  // namespace ddp::text
