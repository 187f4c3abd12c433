#include "ddp/loop/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ddp::loop {
namespace {

struct Rates {
  double samples_per_s = 0;
  double eta_s = 0;
};

Rates rates(const ProgressSnapshot& s) {
  Rates r;
  if (s.elapsed_s > 0 && s.step > 0) {
    r.samples_per_s = static_cast<double>(s.samples) / s.elapsed_s;
    r.eta_s = s.elapsed_s / static_cast<double>(s.step) * static_cast<double>(s.steps - s.step);
  }
  return r;
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  const long long t = std::llround(seconds);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", t / 3600, (t / 60) % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", t / 60, t % 60);
  return buf;
}

std::string format_progress_line(const ProgressSnapshot& s) {
  const Rates r = rates(s);
  char buf[160];
  std::snprintf(buf, sizeof buf, "epoch %d/%d step %lld/%lld loss %.4f %.0f samples/s ETA %s",
                s.epoch, s.epochs, static_cast<long long>(s.step), static_cast<long long>(s.steps),
                s.loss, r.samples_per_s, format_duration(r.eta_s).c_str());
  return buf;
}

std::string format_progress_bar(const ProgressSnapshot& s, int width) {
  const Rates r = rates(s);
  const double frac = s.steps > 0 ? std::clamp(static_cast<double>(s.step) / s.steps, 0.0, 1.0) : 1.0;
  const int filled = static_cast<int>(frac * width);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(width - filled), '.');
  char buf[200];
  std::snprintf(buf, sizeof buf, "epoch %d/%d [%s] %lld/%lld loss %.4f %.0f samples/s ETA %s",
                s.epoch, s.epochs, bar.c_str(), static_cast<long long>(s.step),
                static_cast<long long>(s.steps), s.loss, r.samples_per_s,
                format_duration(r.eta_s).c_str());
  return buf;
}

ProgressPrinter::ProgressPrinter(std::ostream& out, bool enabled, bool is_tty, int log_interval)
    : out_(out), enabled_(enabled), tty_(is_tty), log_interval_(std::max(1, log_interval)) {}

void ProgressPrinter::update(const ProgressSnapshot& s) {
  if (!enabled_) return;
  const bool last = s.step >= s.steps;
  if (tty_) {
    // Redrawing more than ~10 times a second only costs time.
    if (!last && last_draw_s_ >= 0 && s.elapsed_s - last_draw_s_ < 0.1) return;
    last_draw_s_ = s.elapsed_s;
    out_ << "\r\033[K" << format_progress_bar(s) << std::flush;
    bar_open_ = true;
  } else if (s.step % log_interval_ == 0 || last) {
    out_ << format_progress_line(s) << std::endl;
  }
}

void ProgressPrinter::finish_epoch() {
  if (enabled_ && bar_open_) out_ << "\n" << std::flush;
  bar_open_ = false;
  last_draw_s_ = -1;
}

}  // namespace ddp::loop
