// compute_bucket_assignment: Python's compute_bucket_assignment_by_size,
// applied to the parameters in reverse order (see bucket_assignment.h).

#include "ddp/worker/bucket_assignment.h"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace ddp::worker {

std::vector<AssignedBucket> compute_bucket_assignment(const std::vector<ParamSpec>& params,
                                                      const BucketLimits& limits) {
  if (limits.first_bucket_bytes == 0 || limits.bucket_bytes == 0)
    throw std::invalid_argument("bucket limits must be >= 1 byte (first " + std::to_string(limits.first_bucket_bytes) +
                                ", others " + std::to_string(limits.bucket_bytes) + ")");
  struct Open {
    AssignedBucket bucket;
    bool closed_one = false;  // the group already closed its first bucket
  };
  std::map<std::string, Open> open;
  std::vector<AssignedBucket> done;
  auto close = [&](Open& o) {
    if (o.bucket.params.empty()) return;
    done.push_back(std::move(o.bucket));
    o.bucket = AssignedBucket();
    o.closed_one = true;
  };
  for (size_t k = params.size(); k-- > 0;) {
    const auto& p = params[k];
    if (!p.requires_grad) continue;
    auto& o = open[p.group];
    o.bucket.params.push_back(k);
    o.bucket.bytes += p.bytes;
    if (o.bucket.bytes >= (o.closed_one ? limits.bucket_bytes : limits.first_bucket_bytes)) close(o);
  }
  for (auto& [group, o] : open) close(o);
  // Python sorts by the smallest index a bucket holds and reverses: a bucket
  // can go once its smallest-index parameter (the last of its gradients to
  // arrive) is ready, so this is the order in which buckets complete. The
  // smallest index is the last one filled.
  std::stable_sort(done.begin(), done.end(), [](const AssignedBucket& a, const AssignedBucket& b) {
    return a.params.back() > b.params.back();
  });
  return done;
}

}  // namespace ddp::worker
