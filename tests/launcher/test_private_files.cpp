// The files the launcher creates itself (log files, per-rank log
// directories, stack dump files) are never a path that was there before: a
// symlink planted at one is not followed, so whoever could write the
// directory cannot make the launcher overwrite another file (as root, any
// file) or write the job's logs where they can read them (issue 23).
#include "ddp/launcher/output/log_dir.h"
#include "ddp/launcher/diagnose/stack_dump.h"
#include "scratch_dir.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace ddp::launcher;
using ddp::test::ScratchDir;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool is_link(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

}  // namespace

TEST_CASE("private files: a symlink planted at a log file's path is not followed") {
  ScratchDir d;
  const std::string victim = d.make("victim", "keep me", 0644);
  const std::string log = d.dir + "/stdout.log";
  REQUIRE(::symlink(victim.c_str(), log.c_str()) == 0);
  CHECK_THROWS_WITH(open_log_file(log), Catch::Contains("cannot open log file " + log));
  CHECK(slurp(victim) == "keep me");
  CHECK(is_link(log));
}

TEST_CASE("private files: a symlink planted at a rank's log directory is not used") {
  ScratchDir d;
  ::mkdir((d.dir + "/elsewhere").c_str(), 0777);
  REQUIRE(::symlink((d.dir + "/elsewhere").c_str(), (d.dir + "/0").c_str()) == 0);
  CHECK_THROWS_WITH(make_rank_log_dir(d.dir, 0), Catch::Contains("cannot create log directory " + d.dir + "/0") &&
                                                     Catch::Contains("not a directory this user made"));
  CHECK(is_link(d.dir + "/0"));
  // A directory of ours that is there already (made by an earlier call) is used.
  REQUIRE(make_rank_log_dir(d.dir, 1).dir == d.dir + "/1");
  CHECK(make_rank_log_dir(d.dir, 1).stdout_log == d.dir + "/1/stdout.log");
}

TEST_CASE("private files: a symlink planted at a stack dump's path is not followed") {
  ScratchDir d;
  const std::string victim = d.make("victim", "keep me", 0644);
  const std::string dump = d.dir + "/stacks.planted.rank_3.txt";
  REQUIRE(::symlink(victim.c_str(), dump.c_str()) == 0);
  const auto r = dump_stacks({{3, 0, ::getpid(), false}}, d.dir, "planted", 5, StackTools{});
  REQUIRE(r.size() == 1);
  CHECK_THAT(r[0].note, Catch::Contains("cannot write " + dump));
  CHECK(slurp(victim) == "keep me");
  CHECK(is_link(dump));
}
