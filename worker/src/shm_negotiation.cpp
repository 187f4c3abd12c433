// ShmAllreduce::negotiate: whether a group's float sums go through shared
// memory, decided by every rank together through the store (see
// shm_allreduce.h), and the segment they then share.

#include "shm_allreduce.h"
#include "shm_layout.h"
#include "shm_negotiation.h"
#include "shm_segment.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>
#include <utility>

namespace ddp::worker {

namespace shm {

std::string agree_on_mapping(c10d::Store& store, const std::string& prefix, int rank, int world,
                             std::chrono::milliseconds timeout, const std::string& problem, const std::string& name) {
  store.set(prefix + "ok/" + std::to_string(rank), bytes(problem.empty() ? "1" : "0 " + problem));
  std::vector<std::string> ok_keys;
  for (int r = 0; r < world; ++r) ok_keys.push_back(prefix + "ok/" + std::to_string(r));
  store.wait(ok_keys, timeout);
  for (int r = 0; r < world; ++r) {
    const std::string ok = text(store.get(ok_keys[r]));
    if (ok != "1") return "rank " + std::to_string(r) + " " + (ok.size() > 2 ? ok.substr(2) : "could not map " + name);
  }
  return "";
}

}  // namespace shm

namespace {

constexpr int kMaxWorld = 64;

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

std::string link_of(const char* path) {
  char buf[256];
  const ssize_t n = ::readlink(path, buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("?");
}

// Same kernel, same pid and mount namespaces: then /dev/shm is shared and
// pids mean the same process.
std::string machine_identity() {
  return read_first_line("/proc/sys/kernel/random/boot_id") + "|" + link_of("/proc/self/ns/pid") + "|" +
         link_of("/proc/self/ns/mnt");
}

}  // namespace

std::unique_ptr<ShmAllreduce> ShmAllreduce::negotiate(c10d::Store& store, int rank, int world,
                                                      std::chrono::milliseconds timeout, bool enabled,
                                                      std::string* why) {
  using Clock = std::chrono::steady_clock;
  auto off = [&](const std::string& reason) -> std::unique_ptr<ShmAllreduce> {
    if (why) *why = reason;
    return nullptr;
  };
  if (world < 2) return off("a group of one rank");
  if (world > kMaxWorld) return off("more than " + std::to_string(kMaxWorld) + " ranks");

  // 1. Every rank says where it runs. Ranks that are not ours (Python in a
  // mixed group) never do: rank 0 then gives up after a short wait.
  const std::string prefix = "ddp_shm/";
  store.set(prefix + "rank/" + std::to_string(rank),
            shm::bytes(machine_identity() + " " + std::to_string(::getpid()) + " " + (enabled ? "1" : "0")));
  const auto short_wait = std::min(timeout, std::chrono::milliseconds(3000));
  const auto deadline = Clock::now() + short_wait;
  const std::string decision_key = prefix + "decision";
  void* base = nullptr;
  const size_t size = shm::segment_bytes(world);
  std::string name;
  if (rank == 0) {
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r) keys.push_back(prefix + "rank/" + std::to_string(r));
    bool all = false;
    while (!(all = store.check(keys)) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::string decision;
    if (!all) {
      decision = "off not every rank runs ddp_worker";
    } else {
      std::string first_id, pids, reason;
      for (int r = 0; r < world && reason.empty(); ++r) {
        std::istringstream in(shm::text(store.get(keys[r])));
        std::string id, pid, on;
        in >> id >> pid >> on;
        if (r == 0) first_id = id;
        if (on != "1") reason = "rank " + std::to_string(r) + " has DDP_SHM_ALLREDUCE=0";
        else if (id != first_id) reason = "rank " + std::to_string(r) + " runs on another machine or namespace";
        pids += " " + pid;
      }
      if (reason.empty()) {
        name = new_shm_segment_name();
        base = create_shm_segment(name, size);
        if (!base)
          reason = "rank 0 could not create a shared-memory segment of " + std::to_string(size) +
                   " bytes in /dev/shm (full or too small?)";
      }
      decision = reason.empty() ? "on " + name + pids : "off " + reason;
    }
    decision = shm::text(store.compareSet(decision_key, {}, shm::bytes(decision)));
    if (base && decision.rfind("on ", 0) != 0) {  // another rank gave up first
      ::munmap(base, size);
      ::shm_unlink(name.c_str());
      base = nullptr;
    }
  } else {
    while (!store.check({decision_key}) && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    store.compareSet(decision_key, {}, shm::bytes("off rank " + std::to_string(rank) + " saw no decision from rank 0"));
  }
  const std::string decision = shm::text(store.get(decision_key));
  if (decision.rfind("on ", 0) != 0) return off(decision.substr(std::min<size_t>(4, decision.size())));

  // 2. Every rank maps rank 0's segment; all must succeed (every rank here
  // runs this code, so the keys come). Whoever can reach the store may have
  // written the decision: rank 0 uses only the segment it made, the others
  // only one that passes open_shm_segment's checks.
  const std::string made = base ? name : "";  // rank 0: the segment it made
  std::istringstream in(decision.substr(3));
  in >> name;
  std::vector<int> pids(static_cast<size_t>(world));
  for (int& p : pids) in >> p;
  std::string problem;
  if (rank == 0) {
    if (name != made) problem = "refused the shared-memory segment " + name + ": rank 0 did not make it";
  } else {
    // The pid rank 0 posted for itself (step 1), which its segment is named after.
    std::string pid0;
    try {
      store.wait({prefix + "rank/0"}, short_wait);
      std::istringstream posted(shm::text(store.get(prefix + "rank/0")));
      std::string id;
      posted >> id >> pid0;
    } catch (const std::exception&) {
    }
    if (pid0 != std::to_string(pids[0])) pid0.clear();  // the decision disagrees with rank 0's own post
    base = open_shm_segment(name, pid0, size, &problem);
  }
  if (!problem.empty() && problem.rfind("refused", 0) == 0)
    std::cerr << "ddp_worker: warning: rank " << rank << " " << problem
              << "; sums stay on Gloo (someone who can reach the store wrote into it? see docs/security.md)"
              << std::endl;
  const std::string failed = shm::agree_on_mapping(store, prefix, rank, world, timeout, problem, name);
  // The name goes once every rank has mapped it; after a failure rank 0
  // removes the segment it made (never one it did not make).
  const bool all_mapped = store.add(prefix + "mapped", 1) == world;
  if (failed.empty() && all_mapped) ::shm_unlink(name.c_str());
  if (!failed.empty()) {
    if (!made.empty()) ::shm_unlink(made.c_str());
    if (base) ::munmap(base, size);
    return off(failed);
  }
  return std::unique_ptr<ShmAllreduce>(new ShmAllreduce(rank, world, timeout, base, size, std::move(pids)));
}

}  // namespace ddp::worker
