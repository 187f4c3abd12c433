// run_program (program_setup.h), a program's whole main, in process: its
// --help and usage errors, and on two ranks as threads over an in-memory
// store, rank 0's prepare_data running once before any rank's setup, a
// preparation that ends the job or fails, and the fake task trained. The
// programs' own binaries (tests/train, tests/text, tests/examples) keep
// their end-to-end cases; this is what every program gets from the call.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ddp/loop/program_setup.h"
#include "ddp/worker/in_process.h"
#include "ddp/worker/process_group.h"
#include "loop_fake_task.h"
#include "test_support.h"

using namespace loop_test;
using ddp::test::TempDir;

namespace {

// A program on the fake task: its name, one option of its own (--tag) that
// is part of its identity, and a usage text.
ProgramSpec fake_program(std::string& tag, std::optional<FakeTask>& task) {
  ProgramSpec spec;
  spec.options.defaults = options("checkpoints", 1);
  spec.options.defaults.program = "fake-program";
  spec.options.extra = {{"tag", true}};
  spec.options.apply = [&tag](const std::string&, const std::string& value) {
    if (value.empty()) throw UsageError("--tag: empty");
    tag = value;
  };
  spec.usage = "usage: fake-program [options]\n  --tag T\n";
  spec.identity = [&tag] { return std::map<std::string, std::string>{{"tag", tag}}; };
  spec.setup = [&task](const TrainOptions&) -> TrainingTask& { return task.emplace(/*regression=*/false); };
  return spec;
}

// "fake-program" + args as a main's argc and argv.
class Argv {
 public:
  explicit Argv(const std::vector<std::string>& args) : text_{"fake-program"} {
    text_.insert(text_.end(), args.begin(), args.end());
    for (auto& a : text_) pointers_.push_back(a.data());
    pointers_.push_back(nullptr);
  }
  int argc() const { return static_cast<int>(text_.size()); }
  char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> text_;
  std::vector<char*> pointers_;
};

// run_program(argv = "fake-program" + args) with its output and error
// streams; joining is a test failure (nothing here may get that far).
struct MainRun {
  int code = -1;
  std::string out, err;
  int setups = 0;
};
MainRun run_main_without_join(const std::vector<std::string>& args) {
  std::string tag;
  std::optional<FakeTask> task;
  ProgramSpec spec = fake_program(tag, task);
  MainRun run;
  const auto setup = spec.setup;
  spec.setup = [&](const TrainOptions& o) -> TrainingTask& {
    ++run.setups;
    return setup(o);
  };
  Argv argv(args);
  std::ostringstream out, err;
  ProgramContext context{&out, &err, [](const TrainOptions&) -> std::shared_ptr<ddp::worker::ProcessGroup> {
                           throw std::logic_error("run_program joined");
                         }};
  run.code = run_program(argv.argc(), argv.argv(), spec, {}, context);
  run.out = out.str();
  run.err = err.str();
  return run;
}

// What the ranks of one run_program on 2 threads did, in the order they did it.
struct Events {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::string> log;  // "prepare <rank>", "setup <rank> file=<0|1> tag=<identity's tag>"
  bool setup_started = false;
  void add(const std::string& event) {
    std::lock_guard<std::mutex> lock(mutex);
    log.push_back(event);
    if (event.rfind("setup", 0) == 0) setup_started = true;
    changed.notify_all();
  }
};

struct RankMain {
  int code = -1;
  std::string out, error;
};

// run_program on 2 ranks as threads with `args`; `prepare` is each rank's
// prepare_data (it writes `marker`, which setup looks for).
std::vector<RankMain> run_program_on_two_ranks(
    const std::vector<std::string>& args, Events& events, const std::string& marker,
    const std::function<bool(int rank, const TrainOptions&, std::ostream&)>& prepare) {
  std::vector<RankMain> ranks(2);
  const int threads = at::get_num_threads();
  ddp::worker::run_ranks_in_process(2, [&](const std::shared_ptr<ddp::worker::ProcessGroup>& pg) {
    const int rank = pg->rank();
    std::string tag;
    std::optional<FakeTask> task;
    ProgramSpec spec = fake_program(tag, task);
    spec.prepare_data = [&, rank](const TrainOptions& o, std::ostream& out) { return prepare(rank, o, out); };
    const auto setup = spec.setup;
    spec.setup = [&, rank](const TrainOptions& o) -> TrainingTask& {
      const auto identity = o.program_identity.find("tag");
      events.add("setup " + std::to_string(rank) + " file=" + std::to_string(std::filesystem::exists(marker)) +
                 " tag=" + (identity == o.program_identity.end() ? "none" : identity->second));
      TrainingTask& t = setup(o);
      task->set_rank(rank);
      return t;
    };
    Argv argv(args);
    std::ostringstream out, err;
    ProgramContext context{&out, &err, [pg](const TrainOptions&) { return pg; }};
    RankMain& r = ranks[static_cast<std::size_t>(rank)];
    try {
      r.code = run_program(argv.argc(), argv.argv(), spec, {}, context);
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    r.out = out.str();
  });
  at::set_num_threads(threads);  // run_program set the threads of --num_threads
  return ranks;
}

}  // namespace

TEST_CASE("run_program: --help prints the program's usage and exits 0 before any join or data", "[loop][program]") {
  const MainRun run = run_main_without_join({"--epochs", "3", "--help"});
  CHECK(run.code == 0);
  CHECK(run.out == "usage: fake-program [options]\n  --tag T\n");
  CHECK(run.err.empty());
  CHECK(run.setups == 0);
}

TEST_CASE("run_program: a bad option, the loop's or the program's, is one line naming it and exit 2",
          "[loop][program]") {
  const MainRun unknown = run_main_without_join({"--bogus"});
  CHECK(unknown.code == 2);
  CHECK(unknown.err == "fake-program: error: unknown option '--bogus' (see fake-program --help)\n");
  CHECK(unknown.out.empty());
  CHECK(unknown.setups == 0);

  const MainRun own = run_main_without_join({"--epochs", "1", "--tag="});
  CHECK(own.code == 2);
  CHECK(own.err == "fake-program: error: --tag: empty (see fake-program --help)\n");
  CHECK(own.setups == 0);
}

TEST_CASE("run_program: rank 0 prepares once, before any rank loads, then every rank trains", "[loop][program]") {
  TempDir tmp;
  Events events;
  const std::string marker = tmp.file("prepared");
  const auto runs = run_program_on_two_ranks(
      {"--checkpoint_dir", tmp.file("ck"), "--num_threads=1", "--tag", "blue"}, events, marker,
      [&](int rank, const TrainOptions&, std::ostream& out) {
        events.add("prepare " + std::to_string(rank));
        {
          // A rank that did not wait for the preparation would start its
          // setup now: give it time to show itself.
          std::unique_lock<std::mutex> lock(events.mutex);
          events.changed.wait_for(lock, std::chrono::milliseconds(300), [&] { return events.setup_started; });
        }
        std::ofstream(marker) << "ok\n";
        out << "prepared the fake data\n";
        return true;
      });
  for (const auto& r : runs) {
    INFO(r.out << r.error);
    CHECK(r.error.empty());
    CHECK(r.code == 0);
  }
  REQUIRE(events.log.size() == 3);
  CHECK(events.log[0] == "prepare 0");
  const std::vector<std::string> setups(events.log.begin() + 1, events.log.end());
  CHECK_THAT(setups, Catch::UnorderedEquals(std::vector<std::string>{"setup 0 file=1 tag=blue", "setup 1 file=1 tag=blue"}));
  CHECK_THAT(runs[0].out, Catch::StartsWith("prepared the fake data\nfake-program: world size 2, batch 8 per process"));
  CHECK(runs[1].out.empty());
  CHECK(lines_of(tmp.file("ck/metrics.jsonl")).size() == 1);
}

TEST_CASE("run_program: a preparation that was the whole job ends every rank with 0, one that fails fails every rank",
          "[loop][program]") {
  TempDir tmp;
  {
    Events events;
    const auto runs = run_program_on_two_ranks({"--checkpoint_dir", tmp.file("ck")}, events, tmp.file("m"),
                                               [&](int rank, const TrainOptions&, std::ostream&) {
                                                 events.add("prepare " + std::to_string(rank));
                                                 return false;
                                               });
    for (const auto& r : runs) {
      CHECK(r.code == 0);
      CHECK(r.error.empty());
    }
    CHECK(events.log == std::vector<std::string>{"prepare 0"});
    CHECK_FALSE(std::filesystem::exists(tmp.file("ck")));
  }
  {
    Events events;
    const auto runs = run_program_on_two_ranks({"--checkpoint_dir", tmp.file("ck")}, events, tmp.file("m"),
                                               [](int, const TrainOptions&, std::ostream&) -> bool {
                                                 throw std::runtime_error("/data/corpus.txt not found");
                                               });
    CHECK(runs[0].error == "/data/corpus.txt not found");
    CHECK_THAT(runs[1].error, Catch::Contains("/data/corpus.txt not found"));
    CHECK(events.log.empty());
  }
}
