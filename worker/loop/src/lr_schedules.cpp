#include "ddp/loop/lr_schedule.h"

#include <cmath>
#include <sstream>

#include "ddp/loop/plateau_scheduler.h"
#include "ddp/loop/train_options.h"

namespace ddp::loop {
namespace {

class PlateauSchedule : public LrSchedule {
 public:
  explicit PlateauSchedule(const ScheduleContext& ctx) : metric_(ctx.monitor), sched_(options(ctx)) {}
  std::string name() const override { return "plateau"; }
  double at_epoch_end(double metric, double lr, std::string& note) override {
    const double next = sched_.step(metric, lr);
    if (next != lr) {
      std::ostringstream line;
      line << "ReduceLROnPlateau: " << metric_ << " did not improve for " << sched_.options().patience + 1
           << " epochs; learning rate " << lr << " -> " << next;
      note = line.str();
    }
    return next;
  }
  void save(TrainState& s) const override {
    s.plateau = sched_.state();
    s.schedule_name.clear();  // a resumed run's checkpoints are its own schedule's
    s.schedule.clear();
  }
  void load(const TrainState& s) override { sched_.set_state(s.plateau); }

 private:
  static PlateauOptions options(const ScheduleContext& ctx) {
    PlateauOptions p;
    p.mode_max = ctx.higher_is_better;
    p.factor = ctx.options.lr_factor;
    p.patience = ctx.options.lr_patience;
    return p;
  }
  std::string metric_;
  PlateauScheduler sched_;
};

class CosineSchedule : public LrSchedule {
 public:
  CosineSchedule(const ScheduleContext& ctx, double peak)
      : warmup_(ctx.options.warmup_steps), total_(ctx.total_steps), peak_(peak) {}
  std::string name() const override { return "cosine"; }
  double at_step(std::int64_t s, double) override {
    if (s < warmup_) return peak_ * static_cast<double>(s) / static_cast<double>(warmup_);
    const double span = static_cast<double>(std::max<std::int64_t>(1, total_ - warmup_));
    const double progress = std::min(1.0, static_cast<double>(s - warmup_) / span);
    return peak_ * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  void save(TrainState& s) const override {
    s.schedule_name = name();
    s.schedule["peak_lr"] = peak_;
  }
  void load(const TrainState& s) override {
    // A checkpoint of another schedule (a plateau run resumed with
    // --lr_schedule cosine) has no peak: the run's --learning_rate is.
    const auto it = s.schedule.find("peak_lr");
    if (s.schedule_name == name() && it != s.schedule.end()) peak_ = it->second;
  }

 private:
  std::int64_t warmup_, total_;
  double peak_;
};

}  // namespace

std::unique_ptr<LrSchedule> make_plateau_schedule(const ScheduleContext& ctx) {
  return std::make_unique<PlateauSchedule>(ctx);
}

std::unique_ptr<LrSchedule> make_cosine_schedule(const ScheduleContext& ctx, double peak_lr) {
  return std::make_unique<CosineSchedule>(ctx, peak_lr);
}

std::unique_ptr<LrSchedule> make_schedule_from_options(const ScheduleContext& ctx) {
  if (ctx.options.lr_schedule == "cosine") return make_cosine_schedule(ctx, ctx.options.learning_rate);
  return make_plateau_schedule(ctx);
}

}  // namespace ddp::loop
