// spawn_worker's exec failures, seen from the parent: the error names what
// execve could not run (a missing or CRLF-damaged #! interpreter, a file
// that is not a program) and keeps a shell's exit code.
#include "ddp/launcher/process/spawn.h"
#include "scratch_dir.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace ddp::launcher;
namespace fs = std::filesystem;

namespace {

// Files made by the cases: make(name, content, mode = 0755).
struct Scratch : ddp::test::ScratchDir {
  std::string make(const std::string& name, const std::string& content, mode_t mode = 0755) {
    return ScratchDir::make(name, content, mode);
  }
};

// The SpawnError of running exe, which must fail.
SpawnError exec_error(const std::string& exe) {
  SpawnSpec s;
  s.exe = exe;
  s.env = {{"PATH", "/usr/bin:/bin"}};
  try {
    const pid_t pid = spawn_worker(s);
    int st;
    ::waitpid(pid, &st, 0);
  } catch (const SpawnError& e) {
    return e;
  }
  FAIL("no SpawnError for " << exe);
  return SpawnError("", 0, false);
}

}  // namespace

TEST_CASE("spawn: a CRLF #! line names the interpreter, its CR shown escaped, and says Windows line endings") {
  Scratch s;
  const auto e = exec_error(s.make("crlf.sh", "#!/bin/bash\r\necho hi\r\n"));
  CHECK(e.shell_code() == 127);
  CHECK_FALSE(e.fork_failed);
  CHECK_THAT(e.what(), Catch::Contains("the interpreter '/bin/bash\\r' does not exist; the script has Windows line "
                                       "endings"));
}

TEST_CASE("spawn: a #! naming a missing interpreter names it") {
  Scratch s;
  const auto e = exec_error(s.make("missing.sh", "#!/no/such/interpreter -x\necho hi\n"));
  CHECK(e.shell_code() == 127);
  CHECK_THAT(e.what(), Catch::Contains("the interpreter '/no/such/interpreter' named by its #! line does not exist"));
}

TEST_CASE("spawn: a file that is neither a binary nor a #! script is named as such (ENOEXEC, 126)") {
  Scratch s;
  const auto e = exec_error(s.make("noshebang", "echo hi\n"));
  CHECK(e.shell_code() == 126);
  CHECK_THAT(e.what(), Catch::Contains("not a program this machine can run"));
  CHECK_THAT(e.what(), Catch::Contains("#!"));
  const auto elf = exec_error(s.make("badelf", std::string("\x7f" "ELF\x02\x01\x01\0\0\0\0\0\0\0\0\0garbage", 24)));
  CHECK(elf.shell_code() == 126);
  CHECK_THAT(elf.what(), Catch::Contains("not a program this machine can run"));
}

TEST_CASE("spawn: a missing file and a file without execute permission keep errno's own words") {
  Scratch s;
  const auto gone = exec_error(s.dir + "/nothing");
  CHECK(gone.shell_code() == 127);
  CHECK_THAT(gone.what(), Catch::Equals("execve failed: No such file or directory"));
  const auto noexec = exec_error(s.make("noexec", "#!/bin/sh\n", 0644));  // EACCES, root included
  CHECK(noexec.shell_code() == 126);
  CHECK_THAT(noexec.what(), Catch::Equals("execve failed: Permission denied"));
}

TEST_CASE("exec_failure_text reads only the first line, escapes control bytes, and is empty when nothing is known") {
  Scratch s;
  CHECK(exec_failure_text(s.make("ok.sh", "#!/bin/sh\n"), ENOENT).empty());  // the interpreter exists
  CHECK(exec_failure_text(s.dir + "/nothing", ENOENT).empty());
  CHECK_THAT(exec_failure_text(s.make("ctl.sh", "#!/no/\x01sh\n"), ENOENT), Catch::Contains("'/no/\\x01sh'"));
  CHECK_THAT(exec_failure_text(s.make("sp.sh", "#! /no/x\n"), ENOENT), Catch::Contains("'/no/x'"));
  CHECK(exec_failure_text(s.make("ok2.sh", "#!/bin/sh\n"), EACCES).empty());
}
