#pragma once
// A run's identity: the options that decide its trajectory (seed, learning
// rate, batch size, shuffling, steps per epoch, ReduceLROnPlateau, and the
// program's own, TrainOptions::program_identity: ddp-text's model sizes). Every
// checkpoint records it, so a resume can tell its own run's checkpoint from
// another run's left in the same directory. --epochs is not part of it
// (extending a run is a resume), nor the world size (it may change between
// restarts and gets its own note). The launch (launch_directory) tells a
// restart of this job from a later launch of the same command. Pure logic,
// no I/O.

#include <map>
#include <string>
#include <vector>

#include "ddp/loop/train_options.h"

namespace ddp::loop {

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
// Options whose values differ, in key order (then the keys only `saved` has).
std::vector<IdentityChange> identity_changes(const RunIdentity& saved, const RunIdentity& current);
// "--seed 7 (this run: 42), --learning_rate 0.01 (this run: 0.001)".
std::string describe_changes(const std::vector<IdentityChange>& changes);

// What a --resume with changed options really continues with, for the note:
// every option takes the new value from here on ("--seed 7 (was 42)"),
// except the learning rate, which continues from the checkpoint's
// `checkpoint_lr` (Adam's state and ReduceLROnPlateau's reductions come
// with it, as PyTorch's optimizer.load_state_dict keeps the saved rate):
// "--learning_rate 0.001 from the checkpoint (the 0.01 given is not used)".
std::string describe_resume_effect(const std::vector<IdentityChange>& changes, double checkpoint_lr);

// The launch a run belongs to: the directory above "attempt_<N>" in
// TORCHELASTIC_ERROR_FILE, which torchrun (<tmp>/torchelastic_*/<id>_*/
// attempt_N/R/error.json) and ddp-launch ($TMPDIR/ddp-launch-*/attempt_N.
// rank_R.error.json, or <log_dir>/<id>_*/attempt_N/R/error.json) make fresh
// for each launch and keep across its restarts. "" when the path has no
// such part (no launcher, or one that names its files otherwise).
std::string launch_directory(const std::string& error_file);

}  // namespace ddp::loop
