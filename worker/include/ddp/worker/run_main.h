#pragma once
// run_main: the outermost frame of a training program. Runs `body`; when it
// throws, writes TORCHELASTIC_ERROR_FILE (torchelastic's JSON, the way
// Python's @record does: "<Type>: <what>", a backtrace or context, the unix
// timestamp; for a PeerFailure also extraInfo.follows_rank, so the launcher
// never takes it for the root cause) when that variable is set, prints the error to stderr and
// returns 1, so the launcher's failure report shows the real cause. Owns
// nothing else; never calls exit() and never swallows a normal return code.
//
//   int main(int argc, char** argv) {
//     return ddp::worker::run_main(argc, argv, [](int argc, char** argv) { ...; return 0; });
//   }

#include <exception>
#include <functional>
#include <string>

namespace ddp::worker {

int run_main(int argc, char** argv, const std::function<int(int, char**)>& body);

// "<Type>: <what>" for an exception (demangled type; c10::Error without its
// backtrace). Exposed for tests and for programs with their own handler.
std::string describe_exception(const std::exception_ptr& e);

}  // namespace ddp::worker
