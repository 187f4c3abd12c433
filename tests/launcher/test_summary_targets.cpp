// --summary_json at paths that are not plain files: a device (/dev/null), the
// launcher's own stdout (/dev/stdout, a pipe or a file), a FIFO with or
// without a reader, a symlink. They are written through, never replaced, and
// nothing blocks. The /dev cases run in a private mount namespace with a
// tmpfs /dev of their own, so the machine's /dev is never at risk; they skip
// where `unshare --mount` is not permitted.
#include "test_skip.h"
#include "scenario_util.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace ddp::test;
namespace fs = std::filesystem;

namespace {

// Why a private mount namespace cannot be made here, "" when it can.
std::string no_mount_namespace() {
  auto r = run({"unshare", "--mount", "--propagation", "private", "true"}, {}, 30);
  if (r.exit_code == 0) return "";
  return "unshare --mount is not permitted here (" + r.output + ")";
}

// Runs `script` with sh in a private mount namespace whose /dev is a fresh
// tmpfs holding only null (the real device 1,3) and stdout (the usual link
// to /proc/self/fd/1); $L is the launcher, $OUT `out`.
ProcResult in_private_dev(const std::string& script, const std::string& out = "") {
  const std::string setup =
      "mount -t tmpfs tmpfs /dev && mknod -m 666 /dev/null c 1 3 && ln -s /proc/self/fd/1 /dev/stdout || exit 99\n";
  return run({"unshare", "--mount", "--propagation", "private", "sh", "-c", setup + script},
             {{"L", launcher()}, {"OUT", out}}, 60);
}

const char* kLaunch = "\"$L\" --standalone --nproc_per_node 1 --no_python ";

bool is_fifo(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}

}  // namespace

TEST_CASE("summary_json: /dev/null writes into the device and leaves it a device") {
  if (const std::string why = no_mount_namespace(); !why.empty()) DDP_SKIP(why);
  auto r = in_private_dev(std::string(kLaunch) + "--summary_json /dev/null true; echo \"rc=$?\"; "
                          "stat -c 'after: %F %t,%T' /dev/null\n");
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains("rc=0"));
  CHECK_THAT(r.output, Catch::Contains("after: character special file 1,3"));
  CHECK_THAT(r.output, !Catch::Contains("warning"));
}

TEST_CASE("summary_json: /dev/stdout writes to the launcher's stdout, a pipe or a file, and keeps the link") {
  if (const std::string why = no_mount_namespace(); !why.empty()) DDP_SKIP(why);
  TempDir out;
  auto r = in_private_dev(std::string(kLaunch) + "--summary_json /dev/stdout true | cat > \"$OUT/piped\"; " +
                              "echo \"piped rc=$?\"; " + kLaunch +
                              "--summary_json /dev/stdout true > \"$OUT/file\" 2>&1; echo \"file rc=$?\"; " +
                              "stat -c 'after: %F' /dev/stdout\n",
                          out.path());
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains("piped rc=0") && Catch::Contains("file rc=0"));
  CHECK_THAT(r.output, Catch::Contains("after: symbolic link"));
  const std::string piped = read_file(out.file("piped"));
  INFO("piped: " << piped);
  CHECK_THAT(piped, Catch::StartsWith("{\"exit_code\": 0,"));
  // stdout a file: the summary comes after what the launcher wrote there
  // (its run summary table), which is still all there.
  const std::string file = read_file(out.file("file"));
  INFO("file: " << file);
  CHECK_THAT(file, Catch::Contains("ddp-launch: run summary (attempt 0, exit code 0, ") &&
                       Catch::Contains("\n{\"exit_code\": 0,"));
  CHECK(file.find('\0') == std::string::npos);
}

TEST_CASE("summary_json: on a FIFO nobody reads: one warning line, no wait, the FIFO stays") {
  TempDir out;
  const std::string fifo = out.file("s.json");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto r = run({launcher(), "--standalone", "--nproc_per_node", "1", "--no_python", "--summary_json", fifo, "true"}, {},
               30);
  INFO(r.output);
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("ddp-launch: warning: --summary_json not written: ") &&
                           Catch::Contains(fifo) && Catch::Contains("nobody reads"));
  CHECK(is_fifo(fifo));
}

TEST_CASE("summary_json: on a FIFO with a reader: the reader gets the summary, the FIFO stays") {
  TempDir out;
  const std::string fifo = out.file("s.json");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  Proc reader({"sh", "-c", "exec cat \"$0\" > \"$1\"", fifo, out.file("got")});
  // The reader is there once cat's open of the FIFO waits for a writer (a
  // writer's non-blocking open then succeeds). "got" exists before cat runs:
  // waiting for it alone let the launcher finish first now and then.
  const std::string proc = "/proc/" + std::to_string(reader.pid());
  // A kernel that hides wchan ("0") gets cat's exec and a pause instead.
  REQUIRE(wait_until(
      [&] {
        const std::string wchan = read_file(proc + "/wchan");
        return wchan == "wait_for_partner" || (wchan == "0" && read_file(proc + "/comm") == "cat\n");
      },
      30));
  if (read_file(proc + "/wchan") == "0") std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto r = run({launcher(), "--standalone", "--nproc_per_node", "1", "--no_python", "--summary_json", fifo, "true"}, {},
               30);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  REQUIRE(reader.wait(30).has_value());
  CHECK_THAT(read_file(out.file("got")), Catch::StartsWith("{\"exit_code\": 0,"));
  CHECK(is_fifo(fifo));
}

TEST_CASE("summary_json: through a symlink writes the file it names and keeps the link") {
  TempDir out;
  const std::string target = out.file("run42.json");
  write_file(target, std::string(10000, '#'));  // longer than the summary: none of it may be left at its end
  REQUIRE(::symlink(target.c_str(), out.file("latest.json").c_str()) == 0);
  auto r = run({launcher(), "--standalone", "--nproc_per_node", "1", "--no_python", "--summary_json",
                out.file("latest.json"), "true"},
               {}, 30);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(fs::is_symlink(out.file("latest.json")));
  const std::string json = read_file(target);
  CHECK_THAT(json, Catch::StartsWith("{\"exit_code\": 0,"));
  CHECK(json.find('#') == std::string::npos);
}
