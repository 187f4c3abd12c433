#pragma once
// Numerics checks that mean the same on every CPU: float32 results are
// compared with a float64 run of the stock layers, within tolerances derived
// from float32 rounding, and CTest runs them under every CPU capability the
// machine has (tests/train/CMakeLists.txt forces the lower ones with
// ATEN_CPU_CAPABILITY / ONEDNN_MAX_CPU_ISA).

#include <torch/torch.h>

#include <cmath>
#include <cstdint>

namespace ddp::test {

// Unit roundoff of float32.
constexpr double kFloat32Roundoff = 5.960464477539063e-08;  // 2^-24

// Relative error (in norm) that float32 rounding may give a result whose
// longest chain of additions has `terms` terms: rounding errors of a sum
// grow like sqrt(terms) * u (Higham, "Accuracy and Stability of Numerical
// Algorithms", 2nd ed., sec. 2.8), with a factor 8 for the few layers they
// pass through.
inline double float32_tolerance(std::int64_t terms) {
  return 8.0 * kFloat32Roundoff * std::sqrt(static_cast<double>(terms));
}

// ||a - b|| / ||b||, computed in float64.
inline double relative_error(const at::Tensor& a, const at::Tensor& b) {
  const auto b64 = b.to(at::kDouble);
  return (a.to(at::kDouble) - b64).norm().item<double>() / std::max(1e-300, b64.norm().item<double>());
}

}  // namespace ddp::test
