#pragma once
// The CPU capability a CTest entry forces (ATEN_CPU_CAPABILITY, set by
// tests/train/CMakeLists.txt for the numerics cases), when this CPU cannot run
// it: the reason the whole test binary is skipped (catch_main.cpp). LibTorch
// 1.13 does not check the CPU: forced to avx512 on an AVX2-only CPU, its first
// vector kernel dies of SIGILL (measured on an AMD EPYC, 2026-12-05).

#include <optional>
#include <string>

namespace ddp::test {

std::optional<std::string> forced_capability_unsupported();

}  // namespace ddp::test
