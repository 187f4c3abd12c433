#include "ddp/launcher/elastic/elastic_run.h"

#include "ddp/launcher/base/signal_names.h"
#include "ddp/launcher/elastic/agent_source.h"
#include "ddp/launcher/process/event_loop.h"
#include "ddp/common/untrusted_text.h"

#include <algorithm>
#include <sstream>
#include <unistd.h>

namespace ddp::launcher {

namespace {

using rdzv::lines::Command;

// The launcher's signals while it waits on the rendezvous: a forwarded one
// ends the wait (there are no workers to dump stacks of).
class SignalWait final : public EventLoop::Source {
 public:
  explicit SignalWait(SignalChannel& signals) : signals_(signals) {}
  void fds(std::vector<int>& out) override { out.push_back(signals_.fd()); }
  void ready(const pollfd*, size_t) override {
    for (int sig : signals_.drain())
      if (!got && SignalChannel::is_forwarded(sig) && !signals_.is_dump_request(sig)) got = sig;
  }
  int got = 0;

 private:
  SignalChannel& signals_;
};

// The helper's lines until one of `kinds` (or an Error) comes, and its pings.
class AgentWait final : public AgentSource {
 public:
  AgentWait(RdzvLink& agent, std::initializer_list<RdzvEvent::Kind> kinds) : AgentSource(agent), kinds_(kinds) {}
  std::optional<RdzvEvent> event;

 private:
  void on_event(const RdzvEvent& e) override {
    if (!event && (e.kind == RdzvEvent::Error || std::find(kinds_.begin(), kinds_.end(), e.kind) != kinds_.end()))
      event = e;
  }
  std::vector<RdzvEvent::Kind> kinds_;
};

}  // namespace

std::vector<NodeReplacement> parse_replacements(const std::string& text) {
  std::vector<NodeReplacement> out;
  std::istringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    std::vector<std::string> f;
    std::istringstream fields(item);
    for (std::string x; std::getline(fields, x, ':');) f.push_back(x);
    if (f.size() != 5 || f[0].empty() || f[0].find_first_not_of("0123456789") != std::string::npos || f[0].size() > 9)
      continue;  // not one of ours: shown nowhere rather than wrong
    // Host names and pids come from the other nodes, through the store:
    // quoted here, once, for the log line and the summary.
    out.push_back({std::stoi(f[0]), ddp::visible_text(f[1]), ddp::visible_text(f[2]), ddp::visible_text(f[3]),
                   ddp::visible_text(f[4])});
  }
  return out;
}

ElasticRun::ElasticRun(const LaunchPlan& plan, SignalChannel& signals, std::string host, std::ostream& log)
    : plan_(plan), signals_(signals), host_(std::move(host)), log_(log) {}

// The helper's next event of one of `kinds`, serving signals meanwhile.
// nullopt when a signal ended the wait (signal_ says which).
std::optional<RdzvEvent> ElasticRun::await(RdzvLink& agent, std::initializer_list<RdzvEvent::Kind> kinds) {
  SignalWait signals(signals_);
  AgentWait events(agent, kinds);
  EventLoop loop;
  loop.add(signals);
  loop.add(events);
  while (true) {
    loop.run_once();
    if (signals.got) {
      signal_ = signals.got;
      return std::nullopt;
    }
    if (events.event) return events.event;
    if (agent.gone()) {
      RdzvEvent e;
      e.text = "the rendezvous helper (ddp-rdzv) exited";
      return e;
    }
  }
}

void ElasticRun::run(const RunAttempt& run_attempt, std::vector<AttemptResult>& attempts, const BindStore& bind_store) {
  RdzvAgent helper(plan_.opts, plan_.nproc, signals_.original_mask());
  AgentLink agent(helper);
  for (int attempt = 0;; ++attempt) {
    log_ << "ddp-launch: joining the rendezvous at " << endpoint() << " (rdzv_id " << plan_.opts.run_id << ", "
         << nodes_text() << ")" << std::endl;
    // Bound before the join, so the port node rank 0 publishes is already
    // held: no race for it, and no client of an old round knows it.
    const int store_port = bind_store ? bind_store() : 0;
    agent.send(Command::Join, store_port > 0 ? std::to_string(store_port) : "");
    const std::optional<RdzvEvent> round = await(agent, {RdzvEvent::Round, RdzvEvent::Finished});
    if (!round) return;
    if (round->kind == RdzvEvent::Error) {
      error_ = round->text;
      return;
    }
    if (round->kind == RdzvEvent::Finished) {  // a hot spare the job did not need
      log_ << "ddp-launch: " << round->text << std::endl;
      return;
    }
    const NodePlacement& p = round->placement;
    RoundPlacement setup;
    setup.attempt = attempt;
    setup.port = round->master_port;
    setup.restart_count = round->restart_count;
    setup.recovery_generation = round->generation;
    setup.recovery_used = round->used;
    setup.placement = p;
    setup.agent = &agent;
    setup.node = "node n" + std::to_string(p.group_rank) + " (pid " + std::to_string(::getpid()) + ", host " + host_ + ")";
    log_ << "ddp-launch: round " << round->round << ": this is node " << p.group_rank << " of " << p.group_world_size
         << ", ranks " << p.base_rank << ".." << p.base_rank + plan_.nproc - 1 << " of " << p.world_size
         << ", workers' store at " << p.master_addr << ":" << round->master_port << ", restart count "
         << round->restart_count << std::endl;
    const std::vector<NodeReplacement> replaced = parse_replacements(round->replaced);
    for (const NodeReplacement& r : replaced)
      log_ << "ddp-launch: round " << round->round << ": node n" << r.node_rank << " is host " << r.host << " (pid "
           << r.pid << "), a hot spare, in place of host " << r.replaced_host << " (pid " << r.replaced_pid
           << (round->generation > 0 ? "), lost while the round ran: its ranks come back here, in place (generation " +
                                           std::to_string(round->generation) + ")"
                                     : std::string("), which did not come back"))
           << std::endl;
    attempts.push_back(run_attempt(setup));
    AttemptResult& last = attempts.back();
    last.replaced = replaced;
    if (last.succeeded()) {
      agent.send(Command::Done);
      const auto fin = await(agent, {RdzvEvent::Finished});
      if (fin && !fin->text.empty())
        log_ << "ddp-launch: warning: this node's workers succeeded; the exit barrier ended early: " << fin->text
             << std::endl;
      return;
    }
    if (!rejoin(agent, *round, setup, last)) return;
  }
}

bool ElasticRun::rejoin(RdzvLink& agent, const RdzvEvent& round, const RoundPlacement& setup, AttemptResult& last) {
  const int max_restarts = plan_.opts.max_restarts;
  if (last.launcher_signal || last.signal_during_teardown) {
    const int sig = last.launcher_signal ? last.launcher_signal : last.signal_during_teardown;
    agent.send(Command::Abort, "the launcher of " + setup.node + " got " + signal_name(sig));
    await(agent, {RdzvEvent::Aborted});
    return false;
  }
  // The round's reason: ours was sent at the failure (the attempt's
  // rendezvous feature); the answer may name another node's, which came first.
  std::string reason = last.rdzv_stop;
  if (last.rdzv_stop.empty() && last.rdzv_told_failure) {
    const auto answer = await(agent, {RdzvEvent::Restart, RdzvEvent::Abort});
    if (!answer) return false;
    last.rdzv_counted = answer->kind != RdzvEvent::Restart || answer->counted;
    last.rdzv_abort = answer->kind != RdzvEvent::Restart;
    if (answer->kind == RdzvEvent::Error) error_ = answer->text;
    // Kept with a local root cause too: the report says why it was not
    // restarted (the job was ended meanwhile), which a race used to lose.
    if (!last.root_cause || last.rdzv_abort) last.rdzv_stop = answer->text;
    reason = answer->text;
  }
  if (last.rdzv_abort) {
    if (error_.empty() && !last.rdzv_stop.empty() && !last.root_cause) error_ = "the job was ended: " + last.rdzv_stop;
    return false;
  }
  if (!last.unkillable.empty()) {  // a new round here would meet them holding GPUs and ports
    agent.send(Command::Abort, reason + "; " + setup.node + " has workers that SIGKILL cannot end");
    await(agent, {RdzvEvent::Aborted});
    return false;
  }
  // The job's in-place recoveries of this round count too (they share
  // --max_restarts with the restarts).
  const int used = std::max(round.restart_count, last.restarts_used);
  if (last.spawn_failed || (last.rdzv_counted && used >= max_restarts)) {
    agent.send(Command::Abort, reason + "; " + setup.node + " has no restarts left (max_restarts " +
               std::to_string(max_restarts) + ")");
    await(agent, {RdzvEvent::Aborted});
    return false;
  }
  // The round's one reason (every node prints the same), whether it was
  // this node's failure or another's.
  log_ << "ddp-launch: round " << round.round << " ended: " << reason << "; "
       << (last.rdzv_counted ? "restart " + std::to_string(used + 1) + " of " +
                                   std::to_string(max_restarts)
                             : "not counted as a restart")
       << "; rejoining the rendezvous" << std::endl;
  return true;
}

std::string ElasticRun::endpoint() const {
  const RdzvOptions& r = plan_.opts.rdzv;
  if (!r.endpoints.empty()) return "etcd " + r.endpoints;
  return (r.host.find(':') != std::string::npos ? "[" + r.host + "]" : r.host) + ":" + std::to_string(r.port);
}

std::string ElasticRun::nodes_text() const {
  const RdzvOptions& r = plan_.opts.rdzv;
  return r.min_nodes == r.max_nodes ? std::to_string(r.min_nodes) + (r.min_nodes == 1 ? " node" : " nodes")
                                    : std::to_string(r.min_nodes) + " to " + std::to_string(r.max_nodes) + " nodes";
}

}  // namespace ddp::launcher
