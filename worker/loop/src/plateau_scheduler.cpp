#include "ddp/loop/plateau_scheduler.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace ddp::loop {

PlateauScheduler::PlateauScheduler(PlateauOptions opts) : opts_(opts) {
  if (!(opts_.factor > 0.0 && opts_.factor < 1.0))
    throw std::invalid_argument("lr factor " + std::to_string(opts_.factor) +
                                " must be in (0, 1)");
  if (opts_.patience < 0)
    throw std::invalid_argument("lr patience " + std::to_string(opts_.patience) + " must be >= 0");
  state_.best = opts_.mode_max ? -std::numeric_limits<double>::infinity()
                               : std::numeric_limits<double>::infinity();
}

bool PlateauScheduler::is_better(double a, double best) const {
  if (opts_.mode_max) {
    return opts_.threshold_relative ? a > best * (1.0 + opts_.threshold) : a > best + opts_.threshold;
  }
  return opts_.threshold_relative ? a < best * (1.0 - opts_.threshold) : a < best - opts_.threshold;
}

double PlateauScheduler::step(double metric, double lr) {
  state_.last_epoch += 1;
  if (is_better(metric, state_.best)) {
    state_.best = metric;
    state_.num_bad_epochs = 0;
  } else {
    state_.num_bad_epochs += 1;
  }
  // Same order as PyTorch: a cooldown epoch never counts as bad.
  if (state_.cooldown_counter > 0) {
    state_.cooldown_counter -= 1;
    state_.num_bad_epochs = 0;
  }
  if (state_.num_bad_epochs > opts_.patience) {
    const double new_lr = std::max(lr * opts_.factor, opts_.min_lr);
    state_.cooldown_counter = opts_.cooldown;
    state_.num_bad_epochs = 0;
    if (lr - new_lr > opts_.eps) return new_lr;
  }
  return lr;
}

}  // namespace ddp::loop
