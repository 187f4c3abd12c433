#pragma once
// ddp-train's part of the options: its name, its default data directory and
// its --help text; everything else is the loop's (ddp/loop/train_options.h).

#include <string>

#include "ddp/loop/train_options.h"

namespace ddp::fashion {

ddp::loop::ProgramOptions fashion_program_options();
std::string fashion_usage();

}  // namespace ddp::fashion
