// write_output_file on a FIFO whose reader stops reading: it gives up after
// reader_wait, and its message says how long in seconds, as every other
// timeout in the launcher's messages does.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp/common/output_file.h"
#include "test_support.h"

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
