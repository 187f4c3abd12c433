#pragma once
// The launcher's options as Boost.Program_options describes them: one table
// for parsing (options.cpp) and --help (usage_text). Private to config/.

#include <boost/program_options.hpp>

namespace ddp::launcher {

// Every option the launcher knows, underscore spelling.
boost::program_options::options_description supported_options();
// The table as parse_launch_options() reads it.
boost::program_options::options_description make_description();

}  // namespace ddp::launcher
