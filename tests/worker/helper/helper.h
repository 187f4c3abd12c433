#pragma once
// ddp-worker-test-helper's modes (one function each, in the file of its
// concern: collectives, ddp, faults, heartbeat, checkpoint, memory) and what
// several of them share: key=value arguments, a check that throws, the
// parity model, a rank-dependent input. main.cpp holds the one table of
// modes. Nothing here starts a process group; each mode does its own.
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>

#include "ddp/worker/process_group.h"

namespace worker_helper {

// A mode: the helper's argc/argv (argv[1] is the mode); returns the exit code.
using Mode = int (*)(int argc, char** argv);

// collectives.cpp
int init(int argc, char** argv);
int collectives(int argc, char** argv);
int shm(int argc, char** argv);
int shm_room(int argc, char** argv);
int interop(int argc, char** argv);
int rank0_decides_mode(int argc, char** argv);

// ddp.cpp
int parity(int argc, char** argv);
int views(int argc, char** argv);
int overlap(int argc, char** argv);
int unused(int argc, char** argv);

// faults.cpp
int throw_mode(int argc, char** argv);
int hook_throw(int argc, char** argv);
int backward_throws(int argc, char** argv);
int throws_after_reduction(int argc, char** argv);
int train_forever(int argc, char** argv);
int abort_at_exit(int argc, char** argv);

// heartbeat.cpp
int heartbeat(int argc, char** argv);
int stall_step(int argc, char** argv);
int slow_rank(int argc, char** argv);

// checkpoint.cpp
int ckpt_loop(int argc, char** argv);

// memory.cpp
int alloc_faults(int argc, char** argv);

inline std::map<std::string, std::string> parse_kv(int argc, char** argv) {
  std::map<std::string, std::string> kv;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--local_rank", 0) == 0 || a.rfind("--local-rank", 0) == 0) continue;
    auto eq = a.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("expected key=value, got '" + a + "'");
    kv[a.substr(0, eq)] = a.substr(eq + 1);
  }
  return kv;
}

inline std::string arg(const std::map<std::string, std::string>& kv, const std::string& k, const std::string& def) {
  auto it = kv.find(k);
  return it == kv.end() ? def : it->second;
}

inline void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

struct ParityNet : torch::nn::Module {
  ParityNet() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 64));
    fc3 = register_module("fc3", torch::nn::Linear(64, 1));
    // A buffer with a rank-dependent start value: equal on all ranks only if
    // DDP broadcast it from rank 0.
    scale = register_buffer("scale", torch::randn({3}));
  }
  torch::Tensor forward(torch::Tensor x) {
    return fc3(torch::tanh(fc2(torch::tanh(fc1(x)))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  torch::Tensor scale;
};

// x with rank-dependent values, so an average differs from every local value.
inline torch::Tensor rank_input(const ddp::worker::ProcessGroup& pg, int64_t rows, int64_t cols) {
  return torch::ones({rows, cols}) * static_cast<double>(pg.rank() + 1);
}

}  // namespace worker_helper
