// libFuzzer target: the torchelastic error-file reader (common/error_file.cpp)
// on a regular file holding the fuzzer's bytes, as a worker might leave it.
// The reader must always return a record (the file exists) and never throw:
// a damaged file becomes a message that says so.

#include "ddp/common/error_file.h"
#include "fuzz_input.h"

#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ddp::fuzz::ScratchFile file("ddp-fuzz-error-file");
  const std::string& path = file.write(data, size);
  const std::optional<ddp::ErrorRecord> rec = ddp::read_error_file(path);
  if (!rec) {
    std::fprintf(stderr, "read_error_file returned nothing for an existing file\n");
    std::abort();
  }
  return 0;
}
