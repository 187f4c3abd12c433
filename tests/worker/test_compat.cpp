// compat.h: both sides of every LibTorch version rule, in every build. The
// rules are functions of a TorchVersion, so a 1.13 build checks the 2.x side
// too and the other way round; the interop test proves the side the build
// uses against real Python of that version.
#include <catch2/catch.hpp>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <type_traits>

#include "ddp/worker/compat.h"
#include "store_bytes.h"

using namespace ddp::worker::compat;

using ddp::test::store_bytes;

namespace {
constexpr TorchVersion k113{1, 13}, k20{2, 0}, k21{2, 1}, k211{2, 11};
}  // namespace

TEST_CASE("compat: backend keys are scoped like Python 1.13 and 2.x") {
  CHECK(backend_store_prefixes(k113, "cpu") == std::vector<std::string>{"0"});
  CHECK(backend_store_prefixes(k211, "cpu") == std::vector<std::string>{"0/", "cpu/"});
  CHECK(backend_store_prefixes(k20, "cuda") == std::vector<std::string>{"0/", "cuda/"});

  // The keys that land in the default_pg store, as Python's PrefixStores
  // write them (c10d joins prefix and key with "/").
  auto hash = c10::make_intrusive<c10d::HashStore>();
  backend_store(hash, "cpu", k113)->set("k", store_bytes("a"));
  backend_store(hash, "cpu", k211)->set("k", store_bytes("b"));
  backend_store(hash, "cuda", k211)->set("k", store_bytes("c"));
  CHECK(hash->get("0/k") == store_bytes("a"));
  CHECK(hash->get("0//cpu//k") == store_bytes("b"));
  CHECK(hash->get("0//cuda//k") == store_bytes("c"));
  CHECK(hash->getNumKeys() == 3);
}

TEST_CASE("compat: Gloo's rendezvous key per rank in 1.13 and 2.x") {
  CHECK(gloo_rank_key(k113, 0) == "0/rank_0");
  CHECK(gloo_rank_key(k113, 12) == "0/rank_12");
  CHECK(gloo_rank_key(k211, 0) == "0/0");
  CHECK(gloo_rank_key(k211, 12) == "0/12");
}

TEST_CASE("compat: the init barrier is taken before 2.1 only") {
  CHECK(init_barrier_key(k113) == std::optional<std::string>("store_based_barrier_key:1"));
  CHECK(init_barrier_key(k20) == std::optional<std::string>("store_based_barrier_key:1"));
  CHECK_FALSE(init_barrier_key(k21).has_value());
  CHECK_FALSE(init_barrier_key(k211).has_value());
  CHECK(init_barrier_key() == init_barrier_key(kLibTorch));
}

TEST_CASE("compat: versions compare by major then minor") {
  CHECK(k211.at_least(2, 1));
  CHECK(k211.at_least(2, 11));
  CHECK_FALSE(k211.at_least(2, 12));
  CHECK_FALSE(k113.at_least(2, 0));
  CHECK(k113.at_least(1, 13));
  CHECK(TorchVersion{3, 0}.at_least(2, 11));
  CHECK(kLibTorch.major == TORCH_VERSION_MAJOR);
  CHECK(kLibTorch.minor == TORCH_VERSION_MINOR);
}

TEST_CASE("compat: TCPStore options and the backend base class of this LibTorch") {
  auto o = tcp_store_options(1234, true, std::size_t{3}, true, std::chrono::seconds(7));
  CHECK(o.port == 1234);
  CHECK(o.isServer);
  REQUIRE(o.numWorkers.has_value());  // c10::optional in 1.13, std::optional in 2.x
  CHECK(*o.numWorkers == 3);
  CHECK(o.waitWorkers);
  CHECK(o.timeout == std::chrono::milliseconds(7000));
  CHECK(o.multiTenant);
#if DDP_TORCH_VERSION_AT_LEAST(2, 4)
  CHECK_FALSE(o.useLibUV);  // the classic server on every version (see compat.h)
#endif
  auto client = tcp_store_options(1234, false, std::nullopt, false, std::chrono::seconds(1));
  CHECK_FALSE(client.isServer);
  // Backend is what ProcessGroupGloo derives from: ProcessGroup in 1.13,
  // Backend in 2.x.
  STATIC_REQUIRE(std::is_base_of_v<Backend, c10d::ProcessGroupGloo>);
}
