#include "ddp/launcher/report/trace_file.h"

#include "ddp/launcher/base/number_text.h"
#include "ddp/common/json_writer.h"

#include <algorithm>

namespace ddp::launcher {

namespace {

constexpr int kLauncherPid = 1000000;  // above any rank's track id (rank + 1)

int rank_pid(int rank) { return rank + 1; }
int steps_tid(int rank) { return 2 * rank + kLauncherPid + 2; }
int collectives_tid(int rank) { return 2 * rank + kLauncherPid + 3; }

}  // namespace

RunTrace::RunTrace(std::string path, std::string host, uint64_t origin_ns, size_t max_slices)
    : path_(std::move(path)), host_(std::move(host)), origin_ns_(origin_ns), max_slices_(std::max<size_t>(max_slices, 1)) {}

void RunTrace::rank(int rank, int local_rank) { ranks_[rank] = local_rank; }

void RunTrace::push(const Slice& s) {
  if (slices_.size() >= max_slices_) {
    slices_.pop_front();
    ++dropped_;
  }
  slices_.push_back(s);
}

void RunTrace::step(const StepRecord& s) {
  ranks_.emplace(s.rank, s.local_rank);
  push({s.rank, false, s.start_ns, s.end_ns, s.step, s.wait_ns, 0, 0});
}

void RunTrace::collective(const RankCollective& c) {
  ranks_.emplace(c.rank, c.local_rank);
  uint64_t& last_end = collective_end_[c.rank];
  const uint64_t begin = std::max(c.mark.start_ns, last_end);
  const uint64_t end = std::max(c.mark.end_ns, begin);
  last_end = end;
  push({c.rank, true, begin, end, c.mark.seq, static_cast<uint64_t>(c.mark.kind), c.mark.bytes, begin - c.mark.start_ns});
}

void RunTrace::instant(const std::string& name, uint64_t at_ns, std::optional<int> rank) {
  if (instants_.size() >= kTraceMaxInstants) return;
  if (rank) ranks_.emplace(*rank, -1);
  instants_.push_back({name, at_ns, rank});
}

void RunTrace::span(const std::string& name, uint64_t begin_ns, uint64_t end_ns) {
  if (spans_.size() >= kTraceMaxInstants) return;
  spans_.push_back({name, begin_ns, std::max(begin_ns, end_ns)});
}

void RunTrace::lost(const RankLost& l) {
  ranks_.emplace(l.rank, -1);
  RankLost& r = lost_[l.rank];
  r.rank = l.rank;
  r.steps += l.steps;
  r.collectives += l.collectives;
}

uint64_t RunTrace::lost_marks() const {
  uint64_t n = 0;
  for (const auto& [_, l] : lost_) n += l.steps + l.collectives;
  return n;
}

std::string RunTrace::json() const {
  auto us = [this](uint64_t ns) { return fixed_text(ns > origin_ns_ ? static_cast<double>(ns - origin_ns_) / 1e3 : 0.0, 3); };
  auto dur_us = [](uint64_t ns) { return fixed_text(static_cast<double>(ns) / 1e3, 3); };
  auto ms = [](uint64_t ns) { return fixed_text(static_cast<double>(ns) / 1e6, 3); };
  // Compact, one event a line.
  constexpr json::Layout kEvents{",", ":", "\n", "\n"};
  json::Writer j(json::Ascii::ensure, json::kCompact);
  j.object().key("displayTimeUnit").string("ms");
  j.key("otherData").object().key("producer").string("ddp-launch").key("host").string(host_);
  j.key("dropped_slices").integer(dropped_);
  j.key("lost_marks").array();  // written faster than read: never slices
  for (const auto& [rank, l] : lost_)
    j.object().key("rank").integer(rank).key("steps").integer(l.steps).key("collectives").integer(l.collectives).end();
  j.end().end();
  j.key("traceEvents").array(kEvents);
  auto metadata = [&j](const char* name, int pid) -> json::Writer& {
    return j.object().key("name").string(name).key("ph").string("M").key("pid").integer(pid);
  };
  metadata("process_name", kLauncherPid).key("args").object().key("name").string("ddp-launch (" + host_ + ")").end().end();
  metadata("process_sort_index", kLauncherPid).key("args").object().key("sort_index").integer(-1).end().end();
  // The launcher's own instants go on its named "events" thread: Perfetto
  // puts global ("g") instants on a track of no process, "Unnamed SliceTrack".
  metadata("thread_name", kLauncherPid).key("tid").integer(kLauncherPid);
  j.key("args").object().key("name").string("events").end().end();
  for (const auto& [rank, local_rank] : ranks_) {
    std::string name = "rank " + std::to_string(rank) + " (";
    if (local_rank >= 0) name += "local_rank " + std::to_string(local_rank) + ", ";
    name += "host " + host_ + ")";
    const int pid = rank_pid(rank);
    metadata("process_name", pid).key("args").object().key("name").string(name).end().end();
    metadata("process_sort_index", pid).key("args").object().key("sort_index").integer(rank).end().end();
    metadata("thread_name", pid).key("tid").integer(steps_tid(rank));
    j.key("args").object().key("name").string("steps").end().end();
    metadata("thread_name", pid).key("tid").integer(collectives_tid(rank));
    j.key("args").object().key("name").string("collectives").end().end();
  }
  for (const Slice& s : slices_) {
    if (s.collective)
      j.object().key("name").string(collective_kind_name(static_cast<CollectiveKind>(s.b))).key("cat").string("collective");
    else
      j.object().key("name").string("step " + std::to_string(s.a)).key("cat").string("step");
    j.key("ph").string("X").key("ts").number(us(s.begin_ns)).key("dur").number(dur_us(s.end_ns - s.begin_ns));
    j.key("pid").integer(rank_pid(s.rank)).key("tid").integer(s.collective ? collectives_tid(s.rank) : steps_tid(s.rank));
    j.key("args").object();
    if (s.collective)
      j.key("seq").integer(s.a).key("bytes").integer(s.c).key("queued_ms").number(ms(s.queued_ns));
    else
      j.key("step").integer(s.a).key("wait_ms").number(ms(s.b));
    j.end().end();
  }
  for (const Instant& i : instants_) {
    j.object().key("name").string(i.name).key("cat").string("launcher").key("ph").string("i").key("s").string("t");
    j.key("ts").number(us(i.at_ns)).key("pid").integer(i.rank ? rank_pid(*i.rank) : kLauncherPid);
    j.key("tid").integer(i.rank ? steps_tid(*i.rank) : kLauncherPid).end();
  }
  for (const Span& sp : spans_) {
    j.object().key("name").string(sp.name).key("cat").string("launcher").key("ph").string("X");
    j.key("ts").number(us(sp.begin_ns)).key("dur").number(dur_us(sp.end_ns - sp.begin_ns));
    j.key("pid").integer(kLauncherPid).key("tid").integer(kLauncherPid).end();
  }
  j.end().end();
  return j.text() + "\n";
}

std::string format_trace_written(const RunTrace& trace, bool python_heartbeat) {
  std::string line = "ddp-launch: trace of " + std::to_string(trace.ranks()) + " ranks (" +
                     std::to_string(trace.slices()) + " slices";
  if (trace.dropped()) line += ", the " + std::to_string(trace.dropped()) + " oldest dropped";
  line += ")";
  if (trace.lost_marks()) {
    // Not slices at all: say whose, and why, so a sparse timeline is not
    // read as a rank that did nothing.
    line += "; not in it, written faster than read (a page keeps the last " +
            std::to_string(Heartbeat::kCollectiveRing) + " collectives and " + std::to_string(Heartbeat::kStepRing) +
            " steps, read every " + std::to_string(kSampleInterval.count()) + " ms):";
    const char* sep = " ";
    for (const auto& [rank, l] : trace.lost_by_rank()) {
      line += sep + std::string("rank ") + std::to_string(rank) + " ";
      if (l.collectives) line += std::to_string(l.collectives) + " collectives";
      if (l.collectives && l.steps) line += " and ";
      if (l.steps) line += std::to_string(l.steps) + " steps";
      sep = ", ";
    }
    line += ";";
  } else if (trace.slices() == 0 && trace.ranks() > 0 && !python_heartbeat) {
    line += "; no rank marked a step or a collective: a Python script needs --python_heartbeat (or "
            "ddp_launch.heartbeat.enable() in it), a C++ program the ddp worker runtime;";
  }
  return line + " written to " + trace.path() + " (open it in ui.perfetto.dev)\n";
}

}  // namespace ddp::launcher
