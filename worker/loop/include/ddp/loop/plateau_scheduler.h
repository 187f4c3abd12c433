#pragma once
// ReduceLROnPlateau with PyTorch's semantics (torch.optim.lr_scheduler,
// 1.13 and 2.x), limited to what ddp-train needs: one learning rate, any of
// mode min/max, relative or absolute threshold, cooldown, min_lr, eps.
// It only computes the next learning rate; the caller applies it to the
// optimizer. Its whole state is a few numbers (PlateauState) so a checkpoint
// can carry it and a resumed run makes the same decisions.

#include <limits>

namespace ddp::loop {

struct PlateauOptions {
  bool mode_max = true;        // ddp-train maximizes macro-F1
  double factor = 0.1;         // new_lr = lr * factor; must be in (0, 1)
  int patience = 10;           // bad epochs tolerated before reducing
  double threshold = 1e-4;     // "significantly better" margin
  bool threshold_relative = true;  // PyTorch's default threshold_mode='rel'
  int cooldown = 0;
  double min_lr = 0.0;
  double eps = 1e-8;           // reductions smaller than this are ignored
};

struct PlateauState {
  double best = -std::numeric_limits<double>::infinity();
  int num_bad_epochs = 0;
  int cooldown_counter = 0;
  int last_epoch = 0;
};

class PlateauScheduler {
 public:
  // Throws std::invalid_argument when factor is not in (0, 1) or patience < 0.
  explicit PlateauScheduler(PlateauOptions opts);

  // Records one epoch's metric; returns the learning rate to use from now
  // on (== lr when there is no reduction).
  double step(double metric, double lr);

  const PlateauState& state() const { return state_; }
  void set_state(const PlateauState& s) { state_ = s; }
  const PlateauOptions& options() const { return opts_; }

 private:
  bool is_better(double a, double best) const;

  PlateauOptions opts_;
  PlateauState state_;
};

}  // namespace ddp::loop
