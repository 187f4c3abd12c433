#pragma once
// The reference Python of a build: a python3 whose `torch` has the same
// major.minor version as the LibTorch the tests link, so that a test comparing
// with Python (interop, sampler indices, torch.load, error files) compares
// with the same PyTorch. CMake picks the candidate (tests/CMakeLists.txt:
// Debian's /usr/bin/python3 for libtorch-dev 1.13, the wheel's own python for
// pip's LibTorch); $DDP_REFERENCE_PYTHON overrides it. The version is checked
// here, once per test process.
//
// A case that needs it uses DDP_REFERENCE_PYTHON_OR_SKIP: without a matching
// Python the case is skipped with the reason, or FAILS when
// DDP_REQUIRE_REFERENCE_PYTHON=1 (scripts/run-tests sets it, so CI never loses
// a comparison with Python to a silent skip).

#include <optional>
#include <string>

#include "test_skip.h"

namespace ddp::test {

// The python3 path, or nullopt when none matches.
std::optional<std::string> reference_python();
// Why reference_python() is nullopt: the candidate, its torch version or
// error, and what to install or set.
std::string reference_python_problem();
// DDP_REQUIRE_REFERENCE_PYTHON=1 in the environment.
bool reference_python_required();

}  // namespace ddp::test

#define DDP_REFERENCE_PYTHON_OR_SKIP(var)                                  \
  const auto var##_found = ::ddp::test::reference_python();                \
  if (!var##_found) {                                                      \
    if (::ddp::test::reference_python_required())                          \
      FAIL(::ddp::test::reference_python_problem());                       \
    DDP_SKIP(::ddp::test::reference_python_problem());                     \
  }                                                                        \
  const std::string var = *var##_found
