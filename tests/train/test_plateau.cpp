// ReduceLROnPlateau against PyTorch's semantics (mode max, rel threshold
// 1e-4, patience, cooldown, min_lr, eps). Expected sequences were worked out
// from torch/optim/lr_scheduler.py by hand.
#include <catch2/catch.hpp>

#include <vector>

#include "ddp/loop/plateau_scheduler.h"

using namespace ddp::loop;

namespace {
std::vector<double> run(PlateauScheduler& s, double lr, const std::vector<double>& metrics) {
  std::vector<double> lrs;
  for (double m : metrics) lrs.push_back(lr = s.step(m, lr));
  return lrs;
}
}  // namespace

TEST_CASE("plateau: reduces after patience+1 bad epochs, then counts anew", "[train][scheduler]") {
  PlateauOptions o;
  o.factor = 0.5;
  o.patience = 2;
  PlateauScheduler s(o);
  // 0.5 best; three non-improving epochs -> reduce at the third; three more -> reduce again
  const auto lrs = run(s, 1.0, {0.5, 0.4, 0.5, 0.45, 0.3, 0.3, 0.3});
  CHECK(lrs == std::vector<double>{1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25});
  CHECK(s.state().best == 0.5);
  CHECK(s.state().last_epoch == 7);
}

TEST_CASE("plateau: relative threshold 1e-4 ignores tiny gains in mode max", "[train][scheduler]") {
  PlateauOptions o;
  o.factor = 0.1;
  o.patience = 0;
  PlateauScheduler s(o);
  CHECK(s.step(0.8, 1e-3) == 1e-3);                      // first value is always better than -inf
  CHECK(s.step(0.8 * (1 + 0.5e-4), 1e-3) == Approx(1e-4));  // not significantly better: bad epoch
  CHECK(s.state().best == 0.8);
  CHECK(s.step(0.9, 1e-4) == 1e-4);                      // clearly better: no reduction
  CHECK(s.state().best == 0.9);
}

TEST_CASE("plateau: cooldown epochs do not count as bad", "[train][scheduler]") {
  PlateauOptions o;
  o.factor = 0.1;
  o.patience = 0;
  o.cooldown = 2;
  PlateauScheduler s(o);
  const auto lrs = run(s, 1.0, {0.5, 0.1, 0.1, 0.1, 0.1});
  // epoch 2 bad -> reduce, cooldown 2; epochs 3,4 in cooldown; epoch 5 bad -> reduce
  CHECK(lrs[0] == 1.0);
  CHECK(lrs[1] == Approx(0.1));
  CHECK(lrs[2] == Approx(0.1));
  CHECK(lrs[3] == Approx(0.1));
  CHECK(lrs[4] == Approx(0.01));
}

TEST_CASE("plateau: min_lr and eps stop reductions", "[train][scheduler]") {
  PlateauOptions o;
  o.factor = 0.1;
  o.patience = 0;
  o.min_lr = 0.05;
  PlateauScheduler s(o);
  const auto lrs = run(s, 1.0, {0.5, 0.4, 0.4, 0.4});
  CHECK(lrs[1] == Approx(0.1));
  CHECK(lrs[2] == Approx(0.05));
  CHECK(lrs[3] == Approx(0.05));

  PlateauOptions e;
  e.factor = 0.5;
  e.patience = 0;
  PlateauScheduler tiny(e);
  tiny.step(1.0, 1e-8);
  CHECK(tiny.step(0.0, 1e-8) == 1e-8);  // 1e-8 - 5e-9 < eps: unchanged
}

TEST_CASE("plateau: state round-trips so a resumed run decides the same", "[train][scheduler]") {
  PlateauOptions o;
  o.factor = 0.5;
  o.patience = 1;
  PlateauScheduler a(o);
  run(a, 1.0, {0.7, 0.6});
  PlateauScheduler b(o);
  b.set_state(a.state());
  CHECK(a.step(0.6, 1.0) == b.step(0.6, 1.0));
  CHECK(b.state().num_bad_epochs == a.state().num_bad_epochs);
}

TEST_CASE("plateau: bad options are rejected", "[train][scheduler]") {
  PlateauOptions o;
  o.factor = 1.0;
  CHECK_THROWS_AS(PlateauScheduler(o), std::invalid_argument);
  o.factor = 0.5;
  o.patience = -1;
  CHECK_THROWS_AS(PlateauScheduler(o), std::invalid_argument);
}
