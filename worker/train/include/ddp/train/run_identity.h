#pragma once
// A run's identity: the options that decide its trajectory (seed, learning
// rate, batch size, shuffling, steps per epoch, ReduceLROnPlateau). Every
// checkpoint records it, so a resume can tell its own run's checkpoint from
// another run's left in the same directory. --epochs is not part of it
// (extending a run is a resume), nor the world size (it may change between
// restarts and gets its own note). Pure logic, no I/O.

#include <map>
#include <string>
#include <vector>

#include "ddp/train/train_options.h"

namespace ddp::train {

// option name (as on the command line, without "--") -> value text.
using RunIdentity = std::map<std::string, std::string>;

RunIdentity run_identity(const TrainOptions& o);

// "batch_size=64 learning_rate=0.001 ..." (keys sorted); what checkpoints store.
std::string format_identity(const RunIdentity& id);
// Inverse of format_identity; a malformed text yields the pairs it could read.
RunIdentity parse_identity(const std::string& text);

struct IdentityChange {
  std::string option;   // "seed"
  std::string saved;    // in the checkpoint ("(none)" when absent)
  std::string current;  // this run's
};
// Options whose values differ, in key order.
std::vector<IdentityChange> identity_changes(const RunIdentity& saved, const RunIdentity& current);
// "--seed 7 (this run: 42), --learning_rate 0.01 (this run: 0.001)".
std::string describe_changes(const std::vector<IdentityChange>& changes);

}  // namespace ddp::train
