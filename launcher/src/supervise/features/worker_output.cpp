// Where each worker's streams go (config/log_spec.h's plan_output): the
// console, /dev/null, a log file, or an OutputTee pipe that writes both and
// feeds --duplicate_std{out,err}_filters' files. A stderr that goes to the
// console or nowhere passes through the StderrRelay, so its tail is kept; a
// tee'd one is seen by the tee; one redirected to its file is read from the
// file's end. At the end, a failed worker without an error file message
// gets one from the end of its stderr (stderr_failure.h). Without log
// options and with nothing to relay, no pipe and no extra fd exists.
#include "ddp/launcher/config/log_spec.h"
#include "ddp/launcher/diagnose/stderr_failure.h"
#include "ddp/launcher/output/output_tail.h"
#include "ddp/launcher/output/output_tee.h"
#include "ddp/launcher/output/stderr_relay.h"
#include "ddp/launcher/supervise/features/features.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <unistd.h>

namespace ddp::launcher {

namespace {

class WorkerOutput final : public Feature {
 public:
  explicit WorkerOutput(AttemptControl& ctl)
      : ctl_(ctl), logs_(ctl.info().plan.opts.logs), tails_(static_cast<size_t>(ctl.info().plan.nproc)) {}
  ~WorkerOutput() override {
    if (devnull_w_ >= 0) ::close(devnull_w_);
  }

  // The tee's pipes, then the relay's: each its own slice of the poll.
  std::vector<EventLoop::Source*> sources() override { return {&tee_source_, &relay_source_}; }

  void before_spawn(WorkerSlot& w) override {
    if (w.local_rank == 0 && !w.attempt_log_dir.empty()) open_duplicates(w.attempt_log_dir);
    const OutputPlan plan = plan_output(logs_, w.local_rank);
    w.spawn.stdout_fd = route(w, plan.out, w.paths.stdout_log, 1, w.stdout_log);
    w.spawn.stderr_fd = route(w, plan.err, w.paths.stderr_log, 2, w.stderr_log);
    relay_stderr(w, plan.err);
  }

  void drained() override {
    if (tee_) {
      tee_->finish();  // the workers are gone: what they wrote is all in the pipes
      warn(tee_->take_warning());
    }
    if (relay_) relay_->finish();
  }

  // Every byte is read (the groups are gone): a failure without an error
  // file message gets one from the end of its stderr.
  void finish(AttemptResult& r) override {
    for (WorkerExit& w : r.exits) {
      if (!w.failed() || !w.spawn_error.empty() || (w.error && !w.error->message.empty())) continue;
      const OutputTail& tail = tails_[static_cast<size_t>(w.local_rank)];
      const std::string text = !tail.empty() ? tail.text() : w.stderr_log.empty() ? "" : read_file_tail(w.stderr_log);
      if (auto f = failure_from_stderr(text)) {
        w.stderr_message = f->message;
        w.stderr_traceback = f->traceback;
      }
    }
  }

 private:
  // The tee's pipes (only once some stream is tee'd).
  class TeeSource final : public EventLoop::Source {
   public:
    explicit TeeSource(WorkerOutput& o) : o_(o) {}
    void fds(std::vector<int>& out) override {
      if (o_.tee_)
        for (int fd : o_.tee_->fds()) out.push_back(fd);
    }
    void ready(const pollfd*, size_t) override {
      o_.tee_->pump();
      o_.warn(o_.tee_->take_warning());
    }
    // An open line on a terminal whose stream paused (a prompt, a bar).
    std::optional<EventLoop::Clock::time_point> deadline() override {
      return o_.tee_ ? o_.tee_->pause_due() : std::nullopt;
    }
    void due() override {
      o_.tee_->show_paused(OutputTee::Clock::now());
      o_.warn(o_.tee_->take_warning());
    }

   private:
    WorkerOutput& o_;
  };

  // The stderr relay's pipes and ptys (only once some stderr is relayed).
  class RelaySource final : public EventLoop::Source {
   public:
    explicit RelaySource(WorkerOutput& o) : o_(o) {}
    void fds(std::vector<int>& out) override {
      if (o_.relay_)
        for (int fd : o_.relay_->fds()) out.push_back(fd);
    }
    void ready(const pollfd* polled, size_t n) override { o_.relay_->pump(polled, n); }

   private:
    WorkerOutput& o_;
  };

  void warn(const std::string& w) {
    if (!w.empty()) ctl_.log() << w << std::endl;
  }

  // --duplicate_std{out,err}_filters: <attempt>/filtered_std{out,err}.log,
  // fed by the tee, made only when some rank's stream is tee'd to the console.
  void open_duplicates(const std::string& attempt_log_dir) {
    const int nproc = ctl_.info().plan.nproc;
    auto open = [&](int bit, int console_fd, const std::vector<std::string>& filters, const char* name) {
      if (filters.empty() || !tees_to_console(logs_, nproc, bit)) return;
      if (!tee_) tee_.emplace();
      const std::string path = attempt_log_dir + "/" + name;
      tee_->duplicate(console_fd, open_log_file(path), path, filters);
    };
    open(kStdOut, 1, logs_.dup_stdout_filters, "filtered_stdout.log");
    open(kStdErr, 2, logs_.dup_stderr_filters, "filtered_stderr.log");
  }

  // The fd the worker's stream is dup'ed from; -1 keeps the launcher's.
  int route(WorkerSlot& w, StreamTarget t, const std::string& path, int console_fd, std::string& log_path) {
    switch (t) {
      case StreamTarget::Console:
        return -1;
      case StreamTarget::Null:
        if (devnull_w_ < 0) devnull_w_ = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (devnull_w_ < 0) throw std::runtime_error(std::string("cannot open /dev/null: ") + std::strerror(errno));
        return devnull_w_;
      case StreamTarget::File: {
        log_path = path;
        const int fd = open_log_file(path);
        w.close_after.push_back(fd);
        return fd;
      }
      case StreamTarget::Tee: {
        log_path = path;
        if (!tee_) tee_.emplace();
        const LaunchOptions& o = ctl_.info().plan.opts;
        const int fd = tee_->add(open_log_file(path), path, console_fd,
                                 expand_prefix(o.logs.prefix_template, o.role, w.rank, w.local_rank),
                                 observer(w.local_rank, console_fd));
        w.close_after.push_back(fd);
        return fd;
      }
    }
    return -1;
  }

  void relay_stderr(WorkerSlot& w, StreamTarget t) {
    if (t != StreamTarget::Console && t != StreamTarget::Null) return;
    // Output is progress for --stall_timeout, here and in observer()'s.
    if (!relay_)
      relay_.emplace([this](int lr, const char* data, size_t n) {
        tails_[static_cast<size_t>(lr)].append(data, n);
        ctl_.worker_output(lr);
      });
    const int fd = relay_->add(w.local_rank, t == StreamTarget::Console ? 2 : -1);
    warn(relay_->take_warning());
    if (fd < 0) return;  // it keeps what it had: the console itself, or /dev/null
    w.spawn.stderr_fd = fd;
    w.close_after.push_back(fd);
  }

  OutputTee::Observer observer(int lr, int console_fd) {
    if (console_fd != 2) {  // stdout: only progress
      if (ctl_.info().plan.opts.stall_timeout_s <= 0) return {};
      return [this, lr](const char*, size_t) { ctl_.worker_output(lr); };
    }
    return [this, lr](const char* data, size_t n) {
      tails_[static_cast<size_t>(lr)].append(data, n);
      ctl_.worker_output(lr);
    };
  }

  AttemptControl& ctl_;
  const LogOptions& logs_;
  std::optional<OutputTee> tee_;          // only when some stream is tee'd
  std::optional<StderrRelay> relay_;      // only when some stderr goes to the console or nowhere
  std::vector<OutputTail> tails_;         // by local rank
  int devnull_w_ = -1;                    // for ranks outside --local_ranks_filter
  TeeSource tee_source_{*this};
  RelaySource relay_source_{*this};
};

}  // namespace

std::unique_ptr<Feature> make_worker_output(AttemptControl& ctl) { return std::make_unique<WorkerOutput>(ctl); }

}  // namespace ddp::launcher
