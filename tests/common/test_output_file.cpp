// write_output_file on a FIFO whose reader stops reading: it gives up after
// reader_wait, and its message says how long in seconds, as every other
// timeout in the launcher's messages does.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp/common/output_file.h"
#include "test_support.h"
#include "test_skip.h"

using ddp::test::TempDir;

TEST_CASE("output file: a FIFO reader that takes nothing: the message names the wait in seconds") {
  TempDir dir;
  const std::string fifo = dir.file("s.json");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // opened, never read
  REQUIRE(reader >= 0);
  const std::string data(1 << 20, 'x');  // more than the pipe holds
  CHECK_THROWS_WITH(ddp::write_output_file(fifo, data, 0644, std::chrono::milliseconds(200)),
                    Catch::Contains("its reader took") && Catch::Contains(" bytes in 0.2 s and no more"));
  ::close(reader);
}

// fs.protected_symlinks' rule, applied by write_output_file itself (issue 51
// item 2: the machine had it at 0, and root wrote through another user's
// link in /tmp to a root-only file).
TEST_CASE("output file: the protected_symlinks rule: a sticky world-writable directory follows only own links") {
  struct stat dir {}, link {};
  dir.st_mode = S_IFDIR | 01777;
  dir.st_uid = 0;
  link.st_uid = 1000;
  CHECK(!ddp::may_follow_link(link, dir, 0));    // root, another user's link in root's /tmp
  CHECK(ddp::may_follow_link(link, dir, 1000));  // the link's owner
  link.st_uid = 0;
  CHECK(ddp::may_follow_link(link, dir, 1000));  // the directory owner's link
  link.st_uid = 1000;
  dir.st_mode = S_IFDIR | 0777;  // not sticky
  CHECK(ddp::may_follow_link(link, dir, 0));
  dir.st_mode = S_IFDIR | 01755;  // sticky, not world-writable
  CHECK(ddp::may_follow_link(link, dir, 0));
}

TEST_CASE("output file: another user's link in a sticky directory is refused, the target kept, /dev/stdout works") {
  if (::geteuid() != 0) DDP_SKIP("needs root to give a link another owner (lchown)");
  TempDir dir;
  const std::string sticky = dir.file("tmp");
  REQUIRE(::mkdir(sticky.c_str(), 0700) == 0);
  REQUIRE(::chmod(sticky.c_str(), 01777) == 0);
  const std::string secret = dir.file("secret");
  { std::ofstream(secret) << "root only"; }
  const std::string link = sticky + "/trace.json";
  REQUIRE(::symlink(secret.c_str(), link.c_str()) == 0);
  REQUIRE(::lchown(link.c_str(), 65534, 65534) == 0);
  CHECK(ddp::planted_link_reason(link).find("owned by uid 65534") != std::string::npos);
  CHECK_THROWS_WITH(ddp::write_output_file(link, "{}"),
                    Catch::StartsWith("following '" + link + "': a symlink in the sticky, world-writable directory '" +
                                      sticky + "' owned by uid 65534"));
  std::ifstream in(secret);
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(kept == "root only");
  // Root's own link there is followed, and /dev/stdout (in /dev) too.
  REQUIRE(::lchown(link.c_str(), 0, 0) == 0);
  CHECK(ddp::planted_link_reason(link).empty());
  CHECK(ddp::planted_link_reason("/dev/stdout").empty());
}
