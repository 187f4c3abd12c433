#pragma once
// The 2x2 windows of relu + max-pool, shared by relu_max_pool.cpp and
// conv3x3_relu_max_pool.cpp (internal to ddp_fashion): pooling output rows
// with a one-byte argmax per window, and writing a plane's gradient back;
// the same for the windows of one pixel of a channels-last input.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

// Lanes<8> and the templates instantiated with it take and return AVX
// vectors; they are inlined (always_inline) into functions compiled for
// AVX2, so no call passes one across the ABI that GCC warns changes.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace ddp::fashion::pool_windows {

// L lanes of GCC's vector extension (an attribute's size cannot depend on a
// template parameter, hence one specialisation a width). 4 lanes are SSE2
// on baseline x86-64, so every CPU runs the same operations (a maximum and
// a select are exact anyway); 8 are AVX2's, for code compiled for it.
template <int L>
struct Lanes;
template <>
struct Lanes<4> {
  using F = float __attribute__((vector_size(16)));
  using I = std::int32_t __attribute__((vector_size(16)));
  using B = std::uint8_t __attribute__((vector_size(4)));
  static B low_bytes(I v) { return __builtin_convertvector(v, B); }
};
template <>
struct Lanes<8> {
  using F = float __attribute__((vector_size(32)));
  using I = std::int32_t __attribute__((vector_size(32)));
  using B = std::uint8_t __attribute__((vector_size(8)));
  using Bytes = std::uint8_t __attribute__((vector_size(32)));
  // The low byte of each lane (x86 is little-endian): one byte shuffle,
  // where __builtin_convertvector extracts the 8 lanes one by one.
  [[gnu::always_inline]] static B low_bytes(I v) {
    const Bytes b = (Bytes)v;
    return __builtin_shufflevector(b, b, 0, 4, 8, 12, 16, 20, 24, 28);
  }
};
using F4 = Lanes<4>::F;
using I4 = Lanes<4>::I;
using B4 = Lanes<4>::B;

// Window position of the maximum: 0..3 in row-major order, kNone when the
// maximum is <= 0 (relu's output and gradient are 0 there).
constexpr std::uint8_t kNone = 4;

template <class V = F4>
[[gnu::always_inline]] inline V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class V>
[[gnu::always_inline]] inline void store(void* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

// One window, any values: max_pool2d's rule (strictly greater replaces; a
// NaN replaces whatever came before it, so the last NaN wins) and relu's
// (NaN passes, its gradient too).
inline void pool_window(const float (&v)[4], float& out, std::uint8_t& arg) {
  float best = v[0];
  std::uint8_t k = 0;
  for (std::uint8_t q = 1; q < 4; ++q) {
    if (std::isnan(best)) {
      if (std::isnan(v[q])) best = v[q], k = q;
    } else if (std::isnan(v[q]) || v[q] > best) {
      best = v[q], k = q;
    }
  }
  const bool pass = std::isnan(best) || best > 0.0f;
  out = pass ? best : 0.0f;
  arg = pass ? k : kNone;
}

// The window whose top row starts at r0, its bottom row at r1 (NCHW).
inline void pool_one(const float* r0, const float* r1, float& out, std::uint8_t& arg) {
  pool_window({r0[0], r0[1], r1[0], r1[1]}, out, arg);
}

// L windows at once, without branches (which of 4 activations wins is
// unpredictable, so branches mispredict): v[q] holds position q of each
// window. Writes the pooled values and argmaxes; returns a nonzero lane
// where a window holds a NaN (the comparisons do not follow max_pool2d's
// rule there).
template <int L>
[[gnu::always_inline]] inline typename Lanes<L>::I pool_lanes(const typename Lanes<L>::F (&v)[4], float* out,
                                                              std::uint8_t* arg) {
  using F = typename Lanes<L>::F;
  using I = typename Lanes<L>::I;
  F best = v[0];
  I k = I{} + 0;
  for (std::int32_t q = 1; q < 4; ++q) {
    const I greater = v[q] > best;
    best = greater ? v[q] : best;
    k = greater ? I{} + q : k;
  }
  const F zero = F{} + 0.0f;
  const I pass = best > zero;
  store(out, pass ? best : zero);
  store(arg, Lanes<L>::low_bytes(pass ? k : I{} + kNone));
  return (v[0] != v[0]) | (v[1] != v[1]) | (v[2] != v[2]) | (v[3] != v[3]);
}

// Four neighbouring windows (8 columns of rows r0, r1): their positions
// out of the interleaved columns by shuffles, then pool_lanes.
inline I4 pool_four(const float* r0, const float* r1, float* out, std::uint8_t* arg) {
  const F4 a0 = load(r0), a1 = load(r0 + 4), b0 = load(r1), b1 = load(r1 + 4);
  const F4 v[4] = {__builtin_shufflevector(a0, a1, 0, 2, 4, 6), __builtin_shufflevector(a0, a1, 1, 3, 5, 7),
                   __builtin_shufflevector(b0, b1, 0, 2, 4, 6), __builtin_shufflevector(b0, b1, 1, 3, 5, 7)};
  return pool_lanes<4>(v, out, arg);
}

// Calls f(j) for windows j..j+3 of a row of n >= 4 windows: j = 0, 4, 8,
// ..., and, when n is not a multiple of 4, a last j = n - 4 that overlaps
// the four before (they are computed and written twice, the same values).
template <class F>
inline void by_fours(std::int64_t n, F f) {
  for (std::int64_t j = 0;; j += 4) {
    j = std::min(j, n - 4);
    f(j);
    if (j + 4 == n) break;
  }
}

// Output row i of a plane: windows 4 at a time (by_fours); one at a time
// only in rows narrower than 4, and in a row with a NaN.
inline void pool_row(const float* r0, const float* r1, std::int64_t ow, float* out, std::uint8_t* arg) {
  I4 nan = {0, 0, 0, 0};
  if (ow >= 4) by_fours(ow, [&](std::int64_t j) { nan |= pool_four(r0 + 2 * j, r1 + 2 * j, out + j, arg + j); });
  if (ow < 4 || (nan[0] | nan[1] | nan[2] | nan[3])) {
    for (std::int64_t j = 0; j < ow; ++j) pool_one(r0 + 2 * j, r1 + 2 * j, out[j], arg[j]);
  }
}

// Gradient of four windows: g where the window's maximum was, 0 at its other
// three positions (and at all four of a window relu cut off).
inline void unpool_four(const float* g, const std::uint8_t* arg, float* d0, float* d1) {
  B4 a;
  std::memcpy(&a, arg, sizeof a);
  const I4 k = __builtin_convertvector(a, I4);
  const F4 gv = load(g), zero = {0, 0, 0, 0};
  F4 s[4];
  for (std::int32_t q = 0; q < 4; ++q) s[q] = k == I4{q, q, q, q} ? gv : zero;
  store(d0, __builtin_shufflevector(s[0], s[1], 0, 4, 1, 5));
  store(d0 + 4, __builtin_shufflevector(s[0], s[1], 2, 6, 3, 7));
  store(d1, __builtin_shufflevector(s[2], s[3], 0, 4, 1, 5));
  store(d1 + 4, __builtin_shufflevector(s[2], s[3], 2, 6, 3, 7));
}

inline void unpool_one(float g, std::uint8_t k, float* d0, float* d1) {
  d0[0] = k == 0 ? g : 0.0f;
  d0[1] = k == 1 ? g : 0.0f;
  d1[0] = k == 2 ? g : 0.0f;
  d1[1] = k == 3 ? g : 0.0f;
}

// Writes every element of a plane's gradient: the windows' 2x2 blocks, and
// zeros in the row / column an odd height / width leaves out of them.
inline void unpool_plane(const float* g, const std::uint8_t* arg, std::int64_t oh, std::int64_t ow, std::int64_t h,
                         std::int64_t w, float* dst) {
  for (std::int64_t i = 0; i < oh; ++i) {
    float* d0 = dst + 2 * i * w;
    float* d1 = d0 + w;
    const float* gi = g + i * ow;
    const std::uint8_t* ai = arg + i * ow;
    if (ow >= 4) {
      by_fours(ow, [&](std::int64_t j) { unpool_four(gi + j, ai + j, d0 + 2 * j, d1 + 2 * j); });
    } else {
      for (std::int64_t j = 0; j < ow; ++j) unpool_one(gi[j], ai[j], d0 + 2 * j, d1 + 2 * j);
    }
    if (w % 2) d0[w - 1] = d1[w - 1] = 0.0f;
  }
  if (h % 2) std::fill_n(dst + (h - 1) * w, w, 0.0f);
}

// ---- Channels last (memory N, H, W, C): a window's four positions are four
// pixels, each C contiguous channels, so 4 windows (4 channels) pool at once
// lane for lane, without shuffles.

// The C windows of one output pixel: p at its top-left input pixel's
// channels, `right` and `down` the strides (in floats) to the pixel beside
// it and the one below; C pooled values and argmaxes to out and arg. The
// channels past the last four, and all of them when one holds a NaN, one
// at a time.
inline void pool_pixel(const float* p, std::int64_t right, std::int64_t down, std::int64_t c, float* out,
                       std::uint8_t* arg) {
  I4 nan = {0, 0, 0, 0};
  std::int64_t ch = 0;
  for (; ch + 4 <= c; ch += 4) {
    const F4 v[4] = {load(p + ch), load(p + right + ch), load(p + down + ch), load(p + down + right + ch)};
    nan |= pool_lanes<4>(v, out + ch, arg + ch);
  }
  for (ch = (nan[0] | nan[1] | nan[2] | nan[3]) ? 0 : ch; ch < c; ++ch)
    pool_window({p[ch], p[right + ch], p[down + ch], p[down + right + ch]}, out[ch], arg[ch]);
}

// Gradient of one output pixel's C windows (g: C values): g where the
// window's maximum was, 0 at its other three pixels (and at all four where
// relu cut it off). d, right and down as p's in pool_pixel.
inline void unpool_pixel(const float* g, const std::uint8_t* arg, std::int64_t right, std::int64_t down, std::int64_t c,
                         float* d) {
  float* at[4] = {d, d + right, d + down, d + down + right};
  std::int64_t ch = 0;
  for (; ch + 4 <= c; ch += 4) {
    B4 a;
    std::memcpy(&a, arg + ch, sizeof a);
    const I4 k = __builtin_convertvector(a, I4);
    const F4 gv = load(g + ch), zero = {0, 0, 0, 0};
    for (std::int32_t q = 0; q < 4; ++q) store(at[q] + ch, k == I4{q, q, q, q} ? gv : zero);
  }
  for (; ch < c; ++ch)
    for (std::uint8_t q = 0; q < 4; ++q) at[q][ch] = arg[ch] == q ? g[ch] : 0.0f;
}

}  // namespace ddp::fashion::pool_windows

#pragma GCC diagnostic pop
