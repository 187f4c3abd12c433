// Accuracy, macro-F1 and micro-F1 on matrices small enough to check by hand
// (values agree with sklearn.metrics.f1_score), and the contiguous eval
// split that must count every test sample exactly once.
#include <catch2/catch.hpp>

#include <numeric>

#include "ddp/loop/confusion_matrix.h"
#include "ddp/loop/eval_shard.h"

using namespace ddp::loop;

namespace {
// y_true = [0,0,0,1,1,2,2,2], y_pred = [0,0,1,1,2,2,2,0]
ConfusionMatrix example() {
  ConfusionMatrix m(3);
  const int t[] = {0, 0, 0, 1, 1, 2, 2, 2};
  const int p[] = {0, 0, 1, 1, 2, 2, 2, 0};
  for (int i = 0; i < 8; ++i) m.add(t[i], p[i]);
  return m;
}
}  // namespace

TEST_CASE("metrics of a hand-computed 3-class example", "[train][metrics]") {
  const ConfusionMatrix m = example();
  CHECK(m.total() == 8);
  CHECK(m.at(0, 1) == 1);
  CHECK(m.accuracy() == Approx(5.0 / 8));
  // class 0: tp 2 fp 1 fn 1 -> 2/3; class 1: tp 1 fp 1 fn 1 -> 1/2; class 2: tp 2 fp 1 fn 1 -> 2/3
  CHECK(m.class_f1(0) == Approx(2.0 / 3));
  CHECK(m.class_f1(1) == Approx(0.5));
  CHECK(m.class_f1(2) == Approx(2.0 / 3));
  CHECK(m.macro_f1() == Approx((2.0 / 3 + 0.5 + 2.0 / 3) / 3));
  CHECK(m.micro_f1() == Approx(5.0 / 8));
}

TEST_CASE("macro-F1 differs from micro-F1 on imbalanced errors", "[train][metrics]") {
  // 9 samples of class 0 all right, 1 sample of class 1 predicted as 0.
  ConfusionMatrix m(2);
  for (int i = 0; i < 9; ++i) m.add(0, 0);
  m.add(1, 0);
  CHECK(m.accuracy() == Approx(0.9));
  CHECK(m.micro_f1() == Approx(0.9));
  // class 0: 18/(18+1) ; class 1: 0
  CHECK(m.macro_f1() == Approx((18.0 / 19 + 0.0) / 2));
}

TEST_CASE("macro-F1 averages only classes that occur, like sklearn", "[train][metrics]") {
  ConfusionMatrix m(10);
  m.add(3, 3);
  m.add(4, 3);
  // class 3: tp 1 fp 1 fn 0 -> 2/3; class 4: tp 0 fn 1 -> 0; 8 classes absent
  CHECK(m.macro_f1() == Approx((2.0 / 3 + 0.0) / 2));
  CHECK(ConfusionMatrix(4).macro_f1() == 0.0);
  CHECK(ConfusionMatrix(4).accuracy() == 0.0);
}

TEST_CASE("merging per-rank matrices equals one matrix over all samples", "[train][metrics]") {
  ConfusionMatrix a(3), b(3), all(3);
  const int t[] = {0, 0, 0, 1, 1, 2, 2, 2};
  const int p[] = {0, 0, 1, 1, 2, 2, 2, 0};
  for (int i = 0; i < 8; ++i) (i < 3 ? a : b).add(t[i], p[i]), all.add(t[i], p[i]);
  a.merge(b);
  CHECK(a.counts() == all.counts());
  auto round_trip = ConfusionMatrix::from_counts(3, all.counts());
  CHECK(round_trip.macro_f1() == Approx(all.macro_f1()));
  CHECK_THROWS_AS(ConfusionMatrix::from_counts(3, {1, 2}), std::invalid_argument);
  CHECK_THROWS_AS(a.add(3, 0), std::out_of_range);
}

TEST_CASE("contiguous eval shards cover the test set exactly once", "[train][metrics]") {
  for (std::size_t n : {0u, 1u, 7u, 9999u, 10000u}) {
    for (std::size_t world = 1; world <= 9; ++world) {
      std::vector<int> seen(n, 0);
      std::size_t total = 0, lo = n, hi = 0;
      for (std::size_t r = 0; r < world; ++r) {
        const Shard s = contiguous_shard(n, world, r);
        for (std::size_t i = s.begin; i < s.end; ++i) ++seen[i];
        total += s.size();
        lo = std::min(lo, s.size());
        hi = std::max(hi, s.size());
      }
      INFO("n=" << n << " world=" << world);
      CHECK(total == n);
      CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
      CHECK(hi - std::min(lo, hi) <= 1);
    }
  }
  CHECK(contiguous_shard(10000, 2, 0).size() == 5000);
  CHECK(contiguous_shard(10000, 3, 2).end == 10000);
}
