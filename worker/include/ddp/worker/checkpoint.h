#pragma once
// Checkpoints: what a training program needs to resume (model tensors,
// optimizer state, epoch, step, RNG state, a few metrics) in one file written
// atomically, plus a weights-only file for Python. Called by training
// programs, normally on rank 0 only (save_checkpoint(pg, ...) does that).
// Never leaves a partially written file under the final name: data goes to a
// temp file in the same directory, is fsync'ed, renamed over the old file and
// the directory is fsync'ed, so a crash mid-save keeps the previous
// checkpoint. Reading never crashes on a damaged file: any problem is a
// CheckpointError naming the file.
//
// The file is in torch.save's zip format holding a plain dict
//   {"format": "ddp-worker-checkpoint-v1", "model": {name: tensor},
//    "optimizer": uint8 tensor (LibTorch's optimizer archive), "epoch": int,
//    "step": int, "rng_state": uint8 tensor, "metrics": {str: float},
//    "strings": {str: str}, "tensors": {str: tensor}}
// so Python can inspect it with torch.load(path, weights_only=False).
// "tensors" (a program's extra state, e.g. every rank's RNG) is optional:
// files written before it had none and read back with an empty map.
// The same bytes travel between ranks (checkpoint_to_bytes /
// checkpoint_from_bytes), so a rank's state sent to another is exactly what
// a file holds.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/ordered_dict.h>

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace ddp::worker {

class ProcessGroup;

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Checkpoint {
  // Parameters then buffers, by their state_dict names ("fc1.weight").
  torch::OrderedDict<std::string, at::Tensor> model;
  // torch::optim::Optimizer::save() output, opaque bytes ("" = none).
  std::string optimizer;
  int64_t epoch = 0;
  int64_t step = 0;
  at::Tensor rng_state;  // CPU default generator state (undefined = none)
  std::map<std::string, double> metrics;
  std::map<std::string, std::string> strings;
  // Further tensors by name (kept on the CPU when saved; "" keys are fine).
  std::map<std::string, at::Tensor> tensors;
};

// Snapshot of a module (+ optimizer when given) and the CPU RNG state.
Checkpoint make_checkpoint(const torch::nn::Module& module,
                           torch::optim::Optimizer* optimizer = nullptr,
                           int64_t epoch = 0, int64_t step = 0);
// Copies the tensors into the module (names and shapes must match: a
// CheckpointError lists the differences), loads the optimizer state when both
// are present, restores the CPU RNG state when restore_rng.
void apply_checkpoint(const Checkpoint& ckpt, torch::nn::Module& module,
                      torch::optim::Optimizer* optimizer = nullptr, bool restore_rng = true);

// Atomic write (see above). Throws CheckpointError naming the path.
void save_checkpoint(const std::string& path, const Checkpoint& ckpt);
// Rank 0 writes, then every rank waits at a barrier, so no rank reads a
// checkpoint that is not there yet. When rank 0's write fails, rank 0
// throws its CheckpointError and the others a PeerFailure (peer_failure.h).
void save_checkpoint(ProcessGroup& pg, const std::string& path, const Checkpoint& ckpt);
// Loads and maps tensors to `device`. Throws CheckpointError naming the path
// when it is missing, truncated, corrupt or not a checkpoint.
Checkpoint load_checkpoint(const std::string& path, c10::Device device = c10::Device("cpu"));

// The file's bytes (sealed, as save_checkpoint writes them), for sending a
// checkpoint to another rank without a file; and back, verified as a file
// is. `what` names the source in errors ("the state from rank 1").
std::string checkpoint_to_bytes(const Checkpoint& ckpt);
Checkpoint checkpoint_from_bytes(const std::string& bytes, const std::string& what,
                                 c10::Device device = c10::Device("cpu"));

// Plain dict {name: tensor} of the module's parameters and buffers (on CPU),
// readable by Python's torch.load(path) on every version, also under
// weights_only=True (the default since 2.6); written atomically.
void save_weights_for_python(const std::string& path, const torch::nn::Module& module);
// Reads such a dict (also one saved by Python: torch.save(dict(...))).
torch::OrderedDict<std::string, at::Tensor> load_weights(const std::string& path,
                                                         c10::Device device = c10::Device("cpu"));

}  // namespace ddp::worker
