// compute_bucket_assignment without processes: reverse parameter order,
// first-bucket and bucket caps, frozen parameters left out, one bucket
// stream per (dtype, device) group, buckets in the order they complete.
#include <catch2/catch.hpp>

#include <vector>

#include "ddp/worker/bucket_assignment.h"

using ddp::worker::AssignedBucket;
using ddp::worker::BucketLimits;
using ddp::worker::compute_bucket_assignment;
using ddp::worker::ParamSpec;

namespace {

constexpr size_t kKiB = 1024, kMiB = 1024 * 1024;

std::vector<std::vector<size_t>> indices(const std::vector<AssignedBucket>& buckets) {
  std::vector<std::vector<size_t>> out;
  for (const auto& b : buckets) out.push_back(b.params);
  return out;
}

using Buckets = std::vector<std::vector<size_t>>;

}  // namespace

TEST_CASE("bucket assignment: reverse order, a small first bucket, then the cap") {
  std::vector<ParamSpec> p(5, ParamSpec{1 * kMiB, "Float@cpu", true});
  auto b = compute_bucket_assignment(p, {1 * kMiB, 5 * kMiB / 2});
  // 4 fills the first bucket (1 MiB >= 1 MiB); 3, 2, 1 reach 3 MiB >= 2.5 MiB; 0 is left over.
  CHECK(indices(b) == Buckets{{4}, {3, 2, 1}, {0}});
  CHECK(b[0].bytes == 1 * kMiB);
  CHECK(b[1].bytes == 3 * kMiB);
  CHECK(b[2].bytes == 1 * kMiB);
}

TEST_CASE("bucket assignment: small parameters share one bucket until it reaches its limit") {
  std::vector<ParamSpec> p(4, ParamSpec{300 * kKiB, "Float@cpu", true});
  CHECK(indices(compute_bucket_assignment(p, {1 * kMiB, 25 * kMiB})) == Buckets{{3, 2, 1, 0}});
  CHECK(indices(compute_bucket_assignment(p, {600 * kKiB, 25 * kMiB})) == Buckets{{3, 2}, {1, 0}});
}

TEST_CASE("bucket assignment: parameters that do not require grad get no bucket") {
  std::vector<ParamSpec> p(4, ParamSpec{1 * kMiB, "Float@cpu", true});
  p[1].requires_grad = false;
  p[3].requires_grad = false;
  CHECK(indices(compute_bucket_assignment(p, {1 * kMiB, 1 * kMiB})) == Buckets{{2}, {0}});
  for (auto& s : p) s.requires_grad = false;
  CHECK(compute_bucket_assignment(p, {1 * kMiB, 1 * kMiB}).empty());
}

TEST_CASE("bucket assignment: each dtype and device fills its own buckets, each with its own first cap") {
  std::vector<ParamSpec> p{{600 * kKiB, "Float@cpu", true},
                           {600 * kKiB, "Double@cpu", true},
                           {600 * kKiB, "Float@cpu", true},
                           {600 * kKiB, "Double@cpu", true},
                           {600 * kKiB, "Float@cuda:0", true}};
  auto b = compute_bucket_assignment(p, {1 * kMiB, 25 * kMiB});
  // Float@cpu {2, 0} and Double@cpu {3, 1} each reach 1.2 MiB >= 1 MiB; cuda {4} is left over.
  CHECK(indices(b) == Buckets{{4}, {3, 1}, {2, 0}});
}

TEST_CASE("bucket assignment: buckets are ordered by when they complete (smallest index last)") {
  // The Double bucket closes first but holds parameter 1; the Float bucket,
  // left open, holds parameter 0, whose gradient arrives last.
  std::vector<ParamSpec> p{{100 * kKiB, "Float@cpu", true},
                           {2 * kMiB, "Double@cpu", true},
                           {100 * kKiB, "Float@cpu", true}};
  CHECK(indices(compute_bucket_assignment(p, {1 * kMiB, 1 * kMiB})) == Buckets{{1}, {2, 0}});
  // The Double bucket is left open at the end, but it completes (with
  // parameter 1) before the closed Float one (which waits for parameter 0).
  std::vector<ParamSpec> q{{2 * kMiB, "Float@cpu", true},
                           {100 * kKiB, "Double@cpu", true},
                           {100 * kKiB, "Float@cpu", true}};
  CHECK(indices(compute_bucket_assignment(q, {1 * kMiB, 1 * kMiB})) == Buckets{{1}, {2, 0}});
}

TEST_CASE("bucket assignment: a zero limit is an error naming it") {
  std::vector<ParamSpec> p(1, ParamSpec{4, "Float@cpu", true});
  CHECK_THROWS_WITH(compute_bucket_assignment(p, {0, 1}), Catch::Contains("first 0"));
  CHECK(compute_bucket_assignment({}, {1, 1}).empty());
}
