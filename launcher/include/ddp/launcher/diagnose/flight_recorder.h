#pragma once
// PyTorch's flight recorder, pointed into the run. torch keeps a ring of each
// rank's last collectives (its "flight recorder": NCCL and, in 2.11, Gloo
// process groups) and writes it to <prefix><rank> when a collective times
// out or fails. By default the prefix is a shared path in /tmp or
// ~/.cache/torch that the next job overwrites and no report names; so the
// launcher gives every worker, unless the parent environment decides:
//   TORCH_FR_DUMP_TEMP_FILE=<dir>/<attempt_n.>nccl_trace_rank_   (torch reads
//       TORCH_NCCL_DEBUG_INFO_TEMP_FILE, its older name, when this is unset:
//       a parent's value of either name is left alone and neither is set)
//   TORCH_NCCL_DUMP_ON_TIMEOUT=1   (recent torch's default; off in older releases)
// and, after a failed attempt, the report lists the dump files that exist
// (of that attempt; under a parent's prefix, those written since the attempt
// began), and the run directory holding them is kept.
// Always, not only for CUDA jobs: the launcher cannot tell, and the
// variables cost nothing where no process group reads them. The buffer size
// is left to torch (2.11: 2000 entries, torch's recommended size): setting
// TORCH_NCCL_TRACE_BUFFER_SIZE, as older torch needs, makes 2.11 warn in
// every process that the name is deprecated; TORCH_FR_BUFFER_SIZE=2000 is
// 2.11's default. So the trace's memory is what torch chooses, unchanged.
// Pure, but for the directory scan (tests give it a fake directory).

#include "ddp/launcher/config/flight_recorder_env.h"

#include <string>
#include <vector>

namespace ddp::launcher {

struct DumpFile {
  std::string path;
  long long mtime_ns = 0;
  bool operator==(const DumpFile& o) const { return path == o.path && mtime_ns == o.mtime_ns; }
};
// The regular files <prefix>*, sorted by name.
std::vector<DumpFile> list_flight_recorder_files(const std::string& prefix);
// The paths in `after` that are not in `before` with the same mtime: what an
// attempt wrote under a prefix that older files may share (a parent's).
// File times are compared, not clocks: the kernel's are coarse (a file
// written just after a clock reading may carry an earlier time).
std::vector<std::string> new_dumps(const std::vector<DumpFile>& before, const std::vector<DumpFile>& after);

// The report's block, "" when there are none:
//   Flight recorder dumps (each rank's last collectives; read them with
//   `torchfrtrace <dir> --prefix <name>`):
//     <file>
std::string format_flight_recorder_block(const std::vector<std::string>& dumps, const std::string& prefix);

}  // namespace ddp::launcher
