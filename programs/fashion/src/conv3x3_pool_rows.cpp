// Every function here (and in pool_windows.h) that takes or returns 8-lane
// vectors is inlined into channel_rows_avx2 (always_inline), so no call
// passes one across the ABI that GCC warns changes without AVX.
#pragma GCC diagnostic ignored "-Wpsabi"

#include "conv3x3_pool_rows.h"

#include <cstdlib>
#include <cstring>

#include "pool_windows.h"

namespace ddp::fashion::conv3x3_pool {
namespace {

using pool_windows::Lanes;
using pool_windows::load;

// One row of the convolution's output, one at a time: padded rows r0, r1,
// r2 under it. The order of the sums is the one every lane count keeps.
void conv_row(const float* r0, const float* r1, const float* r2, const float* k, float b, std::int64_t w,
              float* out) {
  for (std::int64_t j = 0; j < w; ++j) {
    out[j] = b + k[0] * r0[j] + k[1] * r0[j + 1] + k[2] * r0[j + 2] + k[3] * r1[j] + k[4] * r1[j + 1] +
             k[5] * r1[j + 2] + k[6] * r2[j] + k[7] * r2[j + 1] + k[8] * r2[j + 2];
  }
}

// Output row i through conv_row and pool_windows' rows: rows narrower than
// the lanes, and rows holding a NaN (pool_row follows max_pool2d's NaN rule).
void scalar_row(const Shape& s, const float* padded, const float* k, float bias, std::int64_t i, float* out,
                std::uint8_t* arg) {
  std::vector<float> conv(2 * s.w);  // the two convolution rows under output row i
  const float* r = padded + 2 * i * s.pw;
  conv_row(r, r + s.pw, r + 2 * s.pw, k, bias, s.w, conv.data());
  conv_row(r + s.pw, r + 2 * s.pw, r + 3 * s.pw, k, bias, s.w, conv.data() + s.w);
  pool_windows::pool_row(conv.data(), conv.data() + s.w, s.ow, out + i * s.ow, arg + i * s.ow);
}

// The 9 weights and the bias, broadcast.
template <int L>
struct Kernel {
  using F = typename Lanes<L>::F;
  F k[9], b;
  [[gnu::always_inline]] Kernel(const float* w, float bias) {
    for (int t = 0; t < 9; ++t) k[t] = F{} + w[t];
    b = F{} + bias;
  }
  // Outputs 2m .. (even) or 2m + 1 .. (odd) of the row over padded rows r,
  // r + 1, r + 2: c0, c1, c2 are the split columns that start at 2m, 2m + 1
  // and 2m + 2 (even outputs: even m, odd m, even m + 1; odd outputs: odd m,
  // even m + 1, odd m + 1).
  [[gnu::always_inline]] F row(const float* const c0[3], const float* const c1[3], const float* const c2[3]) const {
    F acc = b;
    for (int t = 0; t < 3; ++t) {
      acc = acc + k[3 * t] * load<F>(c0[t]);
      acc = acc + k[3 * t + 1] * load<F>(c1[t]);
      acc = acc + k[3 * t + 2] * load<F>(c2[t]);
    }
    return acc;
  }
};

// Windows m .. m + L - 1 of output row i (pool_windows::pool_lanes).
template <int L>
[[gnu::always_inline]] inline typename Lanes<L>::I pool_row_lanes(const Kernel<L>& kern, const SplitImage& split,
                                                                  std::int64_t i, std::int64_t m, float* out,
                                                                  std::uint8_t* arg) {
  typename Lanes<L>::F v[4];  // window positions 0..3: rows 2i and 2i + 1, even and odd columns
  for (int t = 0; t < 2; ++t) {
    const std::int64_t r = 2 * i + t;
    const float* even_m[3] = {split.even(r) + m, split.even(r + 1) + m, split.even(r + 2) + m};
    const float* odd_m[3] = {split.odd(r) + m, split.odd(r + 1) + m, split.odd(r + 2) + m};
    const float* even_m1[3] = {even_m[0] + 1, even_m[1] + 1, even_m[2] + 1};
    const float* odd_m1[3] = {odd_m[0] + 1, odd_m[1] + 1, odd_m[2] + 1};
    v[2 * t] = kern.row(even_m, odd_m, even_m1);
    v[2 * t + 1] = kern.row(odd_m, even_m1, odd_m1);
  }
  return pool_windows::pool_lanes<L>(v, out + m, arg + m);
}

template <int L>
[[gnu::always_inline]] inline void channel_rows_lanes(const Shape& s, const SplitImage& split, const float* padded,
                                                      const float* k, float bias, float* out, std::uint8_t* arg) {
  const Kernel<L> kern(k, bias);
  for (std::int64_t i = 0; i < s.oh; ++i) {
    if (s.ow < L) {
      scalar_row(s, padded, k, bias, i, out, arg);
      continue;
    }
    typename Lanes<L>::I nan = {};
    // Windows L at a time; a last group that overlaps the one before when
    // ow is not a multiple of L (written twice, the same values).
    for (std::int64_t m = 0;; m += L) {
      m = m + L > s.ow ? s.ow - L : m;
      nan |= pool_row_lanes<L>(kern, split, i, m, out + i * s.ow, arg + i * s.ow);
      if (m + L == s.ow) break;
    }
    bool any = false;
    for (int q = 0; q < L; ++q) any |= nan[q] != 0;
    if (any) scalar_row(s, padded, k, bias, i, out, arg);
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void channel_rows_avx2(const Shape& s, const SplitImage& split, const float* padded,
                                                       const float* k, float bias, float* out, std::uint8_t* arg) {
  channel_rows_lanes<8>(s, split, padded, k, bias, out, arg);
}

// AVX2's 8 lanes where the CPU has them, unless ATEN_CPU_CAPABILITY asks
// LibTorch for its baseline kernels ("default"): the tests' lower-capability
// passes then run the 4-lane path on any machine.
bool eight_lanes() {
  static const bool yes = [] {
    const char* cap = std::getenv("ATEN_CPU_CAPABILITY");
    return __builtin_cpu_supports("avx2") && !(cap && std::strcmp(cap, "default") == 0);
  }();
  return yes;
}
#endif

}  // namespace

void SplitImage::load(const Shape& s, const float* padded) {
  for (std::int64_t r = 0; r < rows_; ++r) {
    const float* src = padded + r * s.pw;
    float* e = cols_.data() + r * stride_;
    float* o = cols_.data() + (rows_ + r) * stride_;
    for (std::int64_t m = 0; m < stride_; ++m) {
      e[m] = src[2 * m];
      o[m] = src[2 * m + 1];
    }
  }
}

void channel_rows(const Shape& s, const SplitImage& split, const float* padded, const float* k, float bias,
                  float* out, std::uint8_t* arg) {
#if defined(__x86_64__)
  if (eight_lanes()) return channel_rows_avx2(s, split, padded, k, bias, out, arg);
#endif
  channel_rows_lanes<4>(s, split, padded, k, bias, out, arg);
}

}  // namespace ddp::fashion::conv3x3_pool
