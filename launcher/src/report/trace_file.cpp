#include "ddp/launcher/report/trace_file.h"

#include "ddp/launcher/base/number_text.h"
#include "ddp/launcher/report/event_log.h"

#include <algorithm>
#include <cstdio>

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

std::string RunTrace::json() const {
  auto us = [this](uint64_t ns) { return fixed_text(ns > origin_ns_ ? static_cast<double>(ns - origin_ns_) / 1e3 : 0.0, 3); };
  auto dur_us = [](uint64_t ns) { return fixed_text(static_cast<double>(ns) / 1e3, 3); };
  auto ms = [](uint64_t ns) { return fixed_text(static_cast<double>(ns) / 1e6, 3); };
  std::string o;
  o.reserve(256 + slices_.size() * 150);
  o += "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"ddp-launch\",\"host\":" + python_json_string(host_) +
       ",\"dropped_slices\":" + std::to_string(dropped_) + "},\"traceEvents\":[\n";
  o += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(kLauncherPid) +
       ",\"args\":{\"name\":" + python_json_string("ddp-launch (" + host_ + ")") + "}}";
  o += ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + std::to_string(kLauncherPid) +
       ",\"args\":{\"sort_index\":-1}}";
  // The launcher's own instants go on its named "events" thread: Perfetto
  // puts global ("g") instants on a track of no process, "Unnamed SliceTrack".
  o += ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + std::to_string(kLauncherPid) +
       ",\"tid\":" + std::to_string(kLauncherPid) + ",\"args\":{\"name\":\"events\"}}";
  for (const auto& [rank, local_rank] : ranks_) {
    const std::string pid = std::to_string(rank_pid(rank));
    std::string name = "rank " + std::to_string(rank) + " (";
    if (local_rank >= 0) name += "local_rank " + std::to_string(local_rank) + ", ";
    name += "host " + host_ + ")";
    o += ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"name\":" + python_json_string(name) + "}}";
    o += ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"sort_index\":" +
         std::to_string(rank) + "}}";
    o += ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" + std::to_string(steps_tid(rank)) +
         ",\"args\":{\"name\":\"steps\"}}";
    o += ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":" +
         std::to_string(collectives_tid(rank)) + ",\"args\":{\"name\":\"collectives\"}}";
  }
  for (const Slice& s : slices_) {
    const std::string where = ",\"pid\":" + std::to_string(rank_pid(s.rank)) + ",\"tid\":" +
                              std::to_string(s.collective ? collectives_tid(s.rank) : steps_tid(s.rank));
    const std::string when = ",\"ts\":" + us(s.begin_ns) + ",\"dur\":" + dur_us(s.end_ns - s.begin_ns);
    if (s.collective) {
      o += ",\n{\"name\":\"" + std::string(collective_kind_name(static_cast<CollectiveKind>(s.b))) +
           "\",\"cat\":\"collective\",\"ph\":\"X\"" + when + where + ",\"args\":{\"seq\":" + std::to_string(s.a) +
           ",\"bytes\":" + std::to_string(s.c) + ",\"queued_ms\":" + ms(s.queued_ns) + "}}";
    } else {
      o += ",\n{\"name\":\"step " + std::to_string(s.a) + "\",\"cat\":\"step\",\"ph\":\"X\"" + when + where +
           ",\"args\":{\"step\":" + std::to_string(s.a) + ",\"wait_ms\":" + ms(s.b) + "}}";
    }
  }
  for (const Instant& i : instants_) {
    const std::string pid = std::to_string(i.rank ? rank_pid(*i.rank) : kLauncherPid);
    const std::string tid = std::to_string(i.rank ? steps_tid(*i.rank) : kLauncherPid);
    o += ",\n{\"name\":" + python_json_string(i.name) + ",\"cat\":\"launcher\",\"ph\":\"i\",\"s\":\"t\",\"ts\":" +
         us(i.at_ns) + ",\"pid\":" + pid + ",\"tid\":" + tid + "}";
  }
  o += "\n]}\n";
  return o;
}

}  // namespace ddp::launcher
