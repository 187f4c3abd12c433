#include "ddp/worker/run_main.h"

#include <c10/util/Backtrace.h>
#include <c10/util/Exception.h>
#include <cxxabi.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <typeinfo>

#include "ddp/common/error_file.h"
#include "ddp/common/parse.h"
#include "ddp/worker/peer_failure.h"
#include "heartbeat_recorder.h"

namespace ddp::worker {
namespace {

std::string demangle(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}

struct Described {
  std::string message;
  std::string context;  // backtrace where we have one
  std::optional<int> follows_rank;  // a PeerFailure: the rank whose failure this is
};

Described describe(const std::exception_ptr& ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const PeerFailure& e) {
    return {demangle(typeid(e).name()) + ": " + e.what(), "", e.peer_rank()};
  } catch (const c10::Error& e) {
    // c10::Error carries the backtrace of the throw site: the most useful
    // context we can get in C++.
    return {demangle(typeid(e).name()) + ": " + e.what_without_backtrace(), e.what(), std::nullopt};
  } catch (const std::exception& e) {
    return {demangle(typeid(e).name()) + ": " + e.what(), "", std::nullopt};
  } catch (...) {
    auto* t = abi::__cxa_current_exception_type();
    return {std::string(t ? demangle(t->name()) : "unknown") + ": exception not derived from std::exception", "", std::nullopt};
  }
}

}  // namespace

std::string describe_exception(const std::exception_ptr& e) { return describe(e).message; }

int run_main(int argc, char** argv, const std::function<int(int, char**)>& body) {
  try {
    const int code = body(argc, argv);
    // From here on the process only exits: a signal now is a library's
    // teardown, which the launcher names as such (exit_verdict.cpp).
    CollectiveRecorder::mark_exiting();
    return code;
  } catch (...) {
    Described d = describe(std::current_exception());
    std::string context = d.context;
    if (context.empty()) {
      // Standard exceptions carry no trace; the stack where run_main caught
      // it still names the program and the runtime frames.
      context = "uncaught exception in " + std::string(argc > 0 && argv ? argv[0] : "?") +
                ", caught by ddp::worker::run_main\n" + c10::get_backtrace(/*frames_to_skip=*/1);
    }
    // One write for the whole report, so lines of several failing ranks do
    // not interleave on the shared stderr.
    std::string report = "[rank " + get_env("RANK").value_or("?") + "] error: " + d.message + "\n";
    if (auto path = get_env("TORCHELASTIC_ERROR_FILE"); path && !path->empty()) {
      ErrorRecord rec;
      rec.message = d.message;
      rec.callstack = context;
      rec.follows_rank = d.follows_rank;
      rec.timestamp = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
      try {
        write_error_file(*path, rec);
        report += "[rank " + get_env("RANK").value_or("?") + "] error file written to " + *path + "\n";
      } catch (const std::exception& e) {
        report += std::string("could not write TORCHELASTIC_ERROR_FILE: ") + e.what() + "\n";
      }
    }
    std::cerr << report << std::flush;
    return 1;
  }
}

}  // namespace ddp::worker
