#pragma once
// What an exception says, for a message of ours that quotes it: c10's errors
// without the C++ backtrace LibTorch appends (a page of frames would bury the
// one line that matters). Used by the rendezvous and by AsyncWork::wait.

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace ddp::worker {

inline std::string error_text(const std::exception& e) {
  if (auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

}  // namespace ddp::worker
