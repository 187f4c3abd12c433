#pragma once
// How every launcher message writes a set of ranks: "rank 1", "ranks 0,2,3",
// "ranks 0-4,6,7" (runs of three or more as a range, so a thousand waiting
// ranks stay one short line; the dash as in cpulists and Slurm hostlists).
// Pure; the stall verdict (stall_detector) and the stack summary
// (stack_summary) use it, so one report never mixes two formats.

#include <string>
#include <vector>

namespace ddp::launcher {

// "0,2,3" / "0-4,6,7": the ranks sorted, without the word.
std::string rank_list(std::vector<int> ranks);

// "rank 1" for one rank, else "ranks " + rank_list(ranks).
std::string ranks_text(const std::vector<int>& ranks);

}  // namespace ddp::launcher
