#pragma once
// Rank 0's training progress. On a terminal: one bar redrawn in place with
// loss, global samples/s and ETA. Otherwise (logs, CI, a launcher's pipe):
// one plain line every `log_interval` steps plus the epoch's last step, so
// logs stay readable. Time is passed in by the caller, which keeps the
// formatting testable without a clock.

#include <cstdint>
#include <ostream>
#include <string>

namespace ddp::loop {

struct ProgressSnapshot {
  int epoch = 1;
  int epochs = 1;
  std::int64_t step = 0;         // steps done in this epoch
  std::int64_t steps = 0;        // steps in this epoch
  double loss = 0;               // this rank's running mean loss
  std::int64_t samples = 0;      // global samples done in this epoch
  double elapsed_s = 0;          // since the epoch started
};

// "epoch 1/2 step 100/469 loss 0.4213 1523 samples/s ETA 0:23"
std::string format_progress_line(const ProgressSnapshot& s);
// "epoch 1/2 [#######.............]  100/469 loss 0.4213 1523 samples/s ETA 0:23"
std::string format_progress_bar(const ProgressSnapshot& s, int width = 30);
// Seconds as M:SS or H:MM:SS.
std::string format_duration(double seconds);

class ProgressPrinter {
 public:
  // `enabled` false (ranks other than 0) prints nothing.
  ProgressPrinter(std::ostream& out, bool enabled, bool is_tty, int log_interval);
  void update(const ProgressSnapshot& s);
  // Ends a bar line so later output starts on a fresh line.
  void finish_epoch();

 private:
  std::ostream& out_;
  bool enabled_;
  bool tty_;
  int log_interval_;
  bool bar_open_ = false;
  double last_draw_s_ = -1;
};

}  // namespace ddp::loop
