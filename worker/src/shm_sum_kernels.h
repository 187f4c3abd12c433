#pragma once
// The sum kernels of the shared-memory allreduce (shm_allreduce.h): what rank
// r computes over its share of a chunk (through the slots) or of a shared
// buffer (in the areas), and the averaging of DDP's gradients folded into
// those passes. Plain loops over float or double in rank order, so every rank
// gets the same bits; no barrier, no lock, no system call: the object calls
// them between its barriers. Header-only, in an anonymous namespace, for
// shm_allreduce.cpp alone: with internal linkage, as when they lived in that
// file, the compiler inlines and specialises them the same way (with
// external linkage it kept out-of-line copies, different code on the hot path).

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <utility>

#include "shm_layout.h"

namespace ddp::worker::shm {
namespace {

// Rank r sums share r of a chunk of `count` elements: elements [lo, hi).
std::pair<size_t, size_t> share_of(size_t count, int world, int r) {
  return {count * static_cast<size_t>(r) / static_cast<size_t>(world),
          count * static_cast<size_t>(r + 1) / static_cast<size_t>(world)};
}

// What each rank's value becomes before the sum: itself, or divided by the
// world size (`averaged` elements). The division is a true one, as
// Tensor::div_'s, so the result is the one of every rank dividing its
// values before a plain sum, bit for bit; for a power-of-two world the
// exact reciprocal's product is the same number and cheaper.
struct AsIs {
  template <typename T>
  T operator()(T x) const { return x; }
};
template <typename T>
struct DividedBy {
  T world;
  T operator()(T x) const { return x / world; }
};
template <typename T>
struct TimesExactReciprocal {
  T reciprocal;
  T operator()(T x) const { return x * reciprocal; }
};

// Calls f with the functor that averages a value in a group of `world`.
template <typename T, typename F>
void with_averaging(int world, F&& f) {
  if ((world & (world - 1)) == 0) f(TimesExactReciprocal<T>{T(1) / static_cast<T>(world)});
  else f(DividedBy<T>{static_cast<T>(world)});
}

// dst[j] = src[j] for j in [begin, end), those below `averaged` averaged
// (dst may be src: in place).
template <typename T>
void copy_averaging(T* dst, const T* src, size_t begin, size_t end, size_t averaged, int world) {
  const size_t split = std::clamp(averaged, begin, end);
  if (begin < split)
    with_averaging<T>(world, [&](auto value) {
      for (size_t j = begin; j < split; ++j) dst[j] = value(src[j]);
    });
  if (split < end && dst != src) std::memcpy(dst + split, src + split, (end - split) * sizeof(T));
}

// Before a chunk's first barrier: the shares the peers sum go into this
// rank's slot while its own share stays in the chunk, the first `averaged`
// elements of both averaged on the way (one pass: no division pass before
// the copy).
template <typename T>
void stage_chunk(T* own_slot, T* chunk, size_t count, size_t lo, size_t hi, size_t averaged, int world) {
  copy_averaging(own_slot, chunk, 0, lo, averaged, world);
  copy_averaging(own_slot, chunk, hi, count, averaged, world);
  copy_averaging(chunk, chunk, lo, hi, averaged, world);
}

// This rank's share [lo, hi) of a chunk, summed in rank order (((v0 + v1)
// + v2) + ...; v_q: rank q's values, this rank's own from `data`, the
// others' from their slots). The sum builds up in this rank's slot at the
// share (no peer reads it until the second barrier) and its last step
// writes both the slot, where the peers copy the result from, and `data`.
template <typename T>
void sum_share(void* base, int world, int set, int rank, size_t lo, size_t hi, T* data) {
  auto values = [&](int q) -> const T* {
    return q == rank ? data : reinterpret_cast<const T*>(slot(base, world, set, q));
  };
  T* acc = reinterpret_cast<T*>(slot(base, world, set, rank));
  for (int q = 1; q < world; ++q) {
    const T* a = q == 1 ? values(0) : acc;
    const T* b = values(q);
    if (q + 1 < world) {
      for (size_t j = lo; j < hi; ++j) acc[j] = a[j] + b[j];
    } else {
      for (size_t j = lo; j < hi; ++j) {
        const T s = a[j] + b[j];
        acc[j] = s;
        data[j] = s;
      }
    }
  }
}

// Share [lo, hi) of a shared buffer summed where it lies: rank q's values
// at first + q * stride. Block by block the sum builds up in rank order
// (((v0 + v1) + v2) + ...) in a buffer that stays in L1, then goes to every
// rank's area: each value read once and each sum written once per rank.
template <typename T, typename Value>
void sum_in_areas(char* first, size_t stride, int world, size_t lo, size_t hi, Value value) {
  constexpr size_t kBlock = 2048;
  T sum[kBlock];
  auto of = [&](int q) { return reinterpret_cast<T*>(first + static_cast<size_t>(q) * stride); };
  for (size_t b = lo; b < hi; b += kBlock) {
    const size_t n = std::min(kBlock, hi - b);
    const T* x0 = of(0) + b;
    const T* x1 = of(1) + b;
    for (size_t j = 0; j < n; ++j) sum[j] = value(x0[j]) + value(x1[j]);
    for (int q = 2; q < world; ++q) {
      const T* x = of(q) + b;
      for (size_t j = 0; j < n; ++j) sum[j] += value(x[j]);
    }
    for (int q = 0; q < world; ++q) std::memcpy(of(q) + b, sum, n * sizeof(T));
  }
}

// [lo, hi) with its elements below `averaged` averaged, the rest summed.
template <typename T>
void sum_or_average_in_areas(char* first, size_t stride, int world, size_t lo, size_t hi, size_t averaged) {
  const size_t split = std::clamp(averaged, lo, hi);
  if (lo < split)
    with_averaging<T>(world, [&](auto value) { sum_in_areas<T>(first, stride, world, lo, split, value); });
  if (split < hi) sum_in_areas<T>(first, stride, world, split, hi, AsIs{});
}

}  // namespace
}  // namespace ddp::worker::shm
