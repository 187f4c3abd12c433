// DistEnv::from_environment: every required variable missing or malformed
// gives a message naming it and pointing at ddp-launch.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "ddp/worker/env.h"
#include "test_support.h"

using ddp::worker::DistEnv;

namespace {

const char* const kVars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                             "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT"};

// Exactly the given torchrun variables for one scope, the others of kVars
// unset; restored on exit.
class EnvScope {
 public:
  explicit EnvScope(const std::map<std::string, std::optional<std::string>>& vars) : scope_(exactly(vars)) {}

 private:
  static std::map<std::string, std::optional<std::string>> exactly(
      std::map<std::string, std::optional<std::string>> vars) {
    for (const char* v : kVars) vars.emplace(v, std::nullopt);  // emplace keeps a given value
    return vars;
  }
  ddp::test::ScopedEnv scope_;
};

std::map<std::string, std::optional<std::string>> good() {
  return {{"RANK", "1"},         {"WORLD_SIZE", "4"},         {"LOCAL_RANK", "1"},
          {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"},
          {"TORCHELASTIC_USE_AGENT_STORE", "False"}, {"TORCHELASTIC_RESTART_COUNT", "2"}};
}

std::string error_for(const std::map<std::string, std::optional<std::string>>& vars, int argc = 0,
                      char** argv = nullptr) {
  EnvScope scope(vars);
  try {
    DistEnv::from_environment(argc, argv);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("env: a full torchrun environment is read") {
  EnvScope scope(good());
  auto e = DistEnv::from_environment();
  CHECK(e.rank == 1);
  CHECK(e.world_size == 4);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 2);
  CHECK(e.master_addr == "10.0.0.1");
  CHECK(e.master_port == 29500);
  CHECK_FALSE(e.use_agent_store);
  CHECK(e.restart_count == 2);
}

TEST_CASE("env: legacy --local_rank and --local-rank arguments win over LOCAL_RANK") {
  auto vars = good();
  vars["LOCAL_RANK"] = std::nullopt;
  EnvScope scope(vars);
  std::string a0 = "prog", a1 = "--local_rank=0", a2 = "--local-rank", a3 = "1";
  char* argv1[] = {a0.data(), a1.data()};
  CHECK(DistEnv::from_environment(2, argv1).local_rank == 0);
  char* argv2[] = {a0.data(), a2.data(), a3.data()};
  CHECK(DistEnv::from_environment(3, argv2).local_rank == 1);
  CHECK_THROWS_WITH(DistEnv::from_environment(1, argv1), Catch::Contains("LOCAL_RANK is not set"));
}

TEST_CASE("env: agent store flag follows Python (exactly True)") {
  auto vars = good();
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  {
    EnvScope scope(vars);
    CHECK(DistEnv::from_environment().use_agent_store);
  }
  vars["TORCHELASTIC_RESTART_COUNT"] = std::nullopt;
  CHECK_THAT(error_for(vars), Catch::Contains("TORCHELASTIC_RESTART_COUNT is not set"));
  vars = good();
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "yes";
  CHECK_THAT(error_for(vars), Catch::Contains("TORCHELASTIC_USE_AGENT_STORE is 'yes'"));
}

TEST_CASE("env: each missing variable is named with what to do") {
  for (const char* var : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}) {
    INFO(var);
    auto vars = good();
    vars[var] = std::nullopt;
    auto msg = error_for(vars);
    CHECK_THAT(msg, Catch::StartsWith(std::string(var) + " is not set"));
    CHECK_THAT(msg, Catch::Contains("ddp-launch"));
  }
  // LOCAL_WORLD_SIZE is optional (the legacy launcher did not set it).
  auto vars = good();
  vars["LOCAL_WORLD_SIZE"] = std::nullopt;
  EnvScope scope(vars);
  CHECK(DistEnv::from_environment().local_world_size == 4);
}

TEST_CASE("env: several missing variables are named in one message") {
  auto vars = good();
  for (const char* v : {"WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}) vars[v] = std::nullopt;
  CHECK_THAT(error_for(vars), Catch::StartsWith("WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT are not set: "
                                                "run the program under ddp-launch (or torchrun), or set them"));
  vars["RANK"] = std::nullopt;
  CHECK_THAT(error_for(vars), Catch::StartsWith("RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT are not set"));
  vars = good();
  vars["MASTER_ADDR"] = std::nullopt;
  vars["MASTER_PORT"] = std::nullopt;
  CHECK_THAT(error_for(vars), Catch::StartsWith("MASTER_ADDR and MASTER_PORT are not set"));
}

TEST_CASE("env: launched() tells a launched process from one started by hand") {
  {
    EnvScope scope(std::map<std::string, std::optional<std::string>>{});
    CHECK_FALSE(DistEnv::launched());
    const auto e = DistEnv::single_process();
    CHECK(e.standalone);
    CHECK(e.rank == 0);
    CHECK(e.world_size == 1);
  }
  EnvScope scope(std::map<std::string, std::optional<std::string>>{{"MASTER_PORT", "29500"}});
  CHECK(DistEnv::launched());
}

TEST_CASE("env: each malformed variable is named with its value") {
  struct Case {
    const char* var;
    const char* value;
    const char* expect;
  };
  const Case cases[] = {
      {"RANK", "one", "RANK: 'one' is not an integer"},
      {"RANK", "4", "RANK is 4 but WORLD_SIZE is 4"},
      {"RANK", "-1", "RANK: -1 is out of range"},
      {"WORLD_SIZE", "0", "WORLD_SIZE: 0 is out of range"},
      {"WORLD_SIZE", "2x", "WORLD_SIZE: '2x' is not an integer"},
      {"LOCAL_RANK", "", "LOCAL_RANK: empty value"},
      {"LOCAL_RANK", "3", "LOCAL_RANK is 3 but LOCAL_WORLD_SIZE is 2"},
      {"LOCAL_WORLD_SIZE", "0", "LOCAL_WORLD_SIZE: 0 is out of range"},
      {"MASTER_ADDR", "", "MASTER_ADDR is empty"},
      {"MASTER_PORT", "70000", "MASTER_PORT: 70000 is out of range"},
      {"MASTER_PORT", "http", "MASTER_PORT: 'http' is not an integer"},
      {"TORCHELASTIC_RESTART_COUNT", "x", "TORCHELASTIC_RESTART_COUNT: 'x' is not an integer"},
  };
  for (const auto& c : cases) {
    INFO(c.var << "=" << c.value);
    auto vars = good();
    vars[c.var] = std::string(c.value);
    auto msg = error_for(vars);
    CHECK_THAT(msg, Catch::Contains(c.expect));
    CHECK_THAT(msg, Catch::Contains("ddp-launch"));
  }
}
