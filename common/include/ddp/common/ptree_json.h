// Boost.PropertyTree with its JSON reader and writer, for every file that
// parses JSON with it (the error file, timer requests, ddp-text's prepared
// stamp, tests). Include this instead of <boost/property_tree/json_parser.hpp>.
//
// Why: Boost 1.74's json_parser includes <boost/bind.hpp>, which prints a
// deprecation note (#pragma message) in every file that includes it unless
// the program says how it wants bind's placeholders _1, _2, ... Defining
// BOOST_BIND_GLOBAL_PLACEHOLDERS is the fix the note itself names: it keeps
// Boost's old behaviour (placeholders in the global namespace, which
// json_parser's own code uses) and silences no warning. Nothing of ours uses
// the placeholders. Newer Boost (1.76+) no longer includes bind.hpp there.
#pragma once

#ifndef BOOST_BIND_GLOBAL_PLACEHOLDERS
#define BOOST_BIND_GLOBAL_PLACEHOLDERS
#endif
#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>
