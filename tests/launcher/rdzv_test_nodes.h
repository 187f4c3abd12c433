#pragma once
// The in-process rendezvous tests' nodes (test_rendezvous.cpp,
// test_hot_spares.cpp): a node's Config with short timeouts, and the two
// ways a node's idle passes between store waits, over one MemoryStore and
// a FakeClock.
#include "memory_store.h"
#include "rdzv_fake_clock.h"
#include "rendezvous.h"

#include <chrono>
#include <functional>
#include <string>

namespace ddp::rdzv::testing {

using Idle = std::function<bool(int)>;

// --nnodes 2 in run `run_id`, keep-alive 0.1 s x 3, join and close
// timeouts 20 s, last call 0.2 s.
inline Config unit_node(const std::string& run_id, const std::string& name, int nproc, bool hosts_store) {
  Config c;
  c.endpoint = "store:29400";
  c.run_id = run_id;
  c.min_nodes = c.max_nodes = 2;
  c.nproc = nproc;
  c.local_addr = name + "-addr";
  c.hostname = name;
  c.hosts_store = hosts_store;
  c.join_timeout_s = 20;
  c.last_call_timeout_s = 0.2;
  c.close_timeout_s = 20;
  c.keep_alive_interval_s = 0.1;
  return c;
}

// A node's idle while another node moves: it returns when the store has
// changed since this node's last poll, and no time passes. Nothing changing
// for 10 s of real time is a test waiting on time it never gives: the node
// gives up (the join throws) rather than hang.
inline Idle on_change(MemoryStore& store) {
  return [&store, seen = store.version()](int) mutable {
    const unsigned long long now = store.await_change(seen, std::chrono::seconds(10));
    const bool moved = now != seen;
    seen = now;
    return moved;
  };
}

// A node's idle when the time it waits for must pass: on the fake clock.
inline Idle time_passes(FakeClock& clock) {
  return [&clock](int ms) {
    clock.advance(std::chrono::milliseconds(ms));
    return true;
  };
}

}  // namespace ddp::rdzv::testing
