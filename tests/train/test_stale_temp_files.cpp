// remove_stale_temp_files on the names write_file_atomically gives its temp
// files (".<name>.tmp.<pid>.<16 hex>", issue 23) and the older ones
// (".<name>.tmp.<pid>"): a killed writer's are removed, nothing else.
#include <catch2/catch.hpp>

#include <filesystem>

#include "ddp/common/atomic_file.h"
#include "ddp/loop/checkpoint_files.h"
#include "test_support.h"

namespace fs = std::filesystem;
using ddp::test::TempDir;
using ddp::test::write_file;

TEST_CASE("stale temp files: today's random names and older pid-only names are removed, others kept") {
  TempDir dir;
  const std::string hex = "0123456789abcdef";
  const std::string todays = fs::path(ddp::atomic_temp_prefix(dir.file("epoch_3.pt"))).filename().string() + hex;
  for (const std::string& name :
       {todays, ".metrics.jsonl.tmp.77." + hex, ".ddp-loop-write-test.tmp.6." + hex, ".ddp-train-write-test.tmp.5." + hex, std::string(".epoch_2.pt.tmp.4194000"),
        std::string(".epoch_3.pt.tmp.9.xyz"), ".epoch_3.pt.tmp.9." + hex + "0", std::string(".notes.tmp.5.") + hex})
    write_file(dir.file(name), "partial");
  const auto removed = ddp::loop::remove_stale_temp_files(dir.path());
  CHECK(removed == std::vector<std::string>{".ddp-loop-write-test.tmp.6." + hex, ".ddp-train-write-test.tmp.5." + hex, ".epoch_2.pt.tmp.4194000", todays,
                                            ".metrics.jsonl.tmp.77." + hex});
  CHECK(fs::exists(dir.file(".epoch_3.pt.tmp.9.xyz")));
  CHECK(fs::exists(dir.file(".epoch_3.pt.tmp.9." + hex + "0")));
  CHECK(fs::exists(dir.file(".notes.tmp.5." + hex)));
}
