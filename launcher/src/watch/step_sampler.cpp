#include "ddp/launcher/watch/step_sampler.h"

namespace ddp::launcher {

void StepSampler::watch(int local_rank, int rank, std::shared_ptr<const Heartbeat> page) {
  if (local_rank < 0) return;
  if (static_cast<size_t>(local_rank) >= pages_.size()) pages_.resize(static_cast<size_t>(local_rank) + 1);
  Page& p = pages_[static_cast<size_t>(local_rank)];
  p = Page{};
  p.rank = rank;
  p.page = std::move(page);
}

void StepSampler::read(Sample& out) {
  for (size_t lr = 0; lr < pages_.size(); ++lr) read_page(static_cast<int>(lr), pages_[lr], out);
}

void StepSampler::read(int local_rank, Sample& out) {
  if (local_rank >= 0 && static_cast<size_t>(local_rank) < pages_.size())
    read_page(local_rank, pages_[static_cast<size_t>(local_rank)], out);
}

void StepSampler::read_page(int local_rank, Page& p, Sample& out) {
  if (!p.page) return;
  marks_.clear();
  const uint64_t lost = p.page->read_steps(p.next_step, marks_);
  if (lost > 0) {
    lost_steps_ += lost;
    p.open.reset();  // its end is gone with the lost marks
  }
  for (const StepMark& m : marks_) {
    // A step's end is the next step's start (a step mark that goes back, a
    // restarted count, still ends the step before it).
    if (p.open && m.start_ns >= p.open->start_ns) {
      StepRecord s;
      s.rank = p.rank;
      s.local_rank = local_rank;
      s.step = p.open->step;
      s.start_ns = p.open->start_ns;
      s.end_ns = m.start_ns;
      s.wait_ns = m.wait_ns >= p.open->wait_ns ? m.wait_ns - p.open->wait_ns : 0;
      out.steps.push_back(s);
    }
    p.open = m;
  }
  done_.clear();
  const uint64_t lost_collectives = p.page->read_collectives(p.next_seq, done_);
  lost_collectives_ += lost_collectives;
  if (lost > 0 || lost_collectives > 0) out.lost.push_back({p.rank, lost, lost_collectives});
  for (const CollectiveMark& c : done_) out.collectives.push_back({p.rank, local_rank, c});
}

}  // namespace ddp::launcher
