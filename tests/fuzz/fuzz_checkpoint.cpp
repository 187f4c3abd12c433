// libFuzzer target: the checkpoint and weights readers (worker/checkpoint.cpp)
// on a regular file holding the fuzzer's bytes.
// load_checkpoint refuses any file whose CRC-32 seal does not match, so
// random bytes would never get past it to the zip reader and the unpickler.
// Every input is therefore read twice: as it is (the seal check itself), and,
// when it ends in a zip end-of-central-directory record, resealed the way
// save_checkpoint seals (the comment replaced by a correct
// "ddp-worker crc32=XXXXXXXX"), so mutations of the archive reach the parser.
// Bad input may only end in a CheckpointError; any other exception, crash,
// leak or UB is a bug.

#include "ddp/worker/checkpoint.h"
#include "fuzz_input.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <zlib.h>

namespace {

constexpr size_t kEocdSize = 22;

// The input with its end-of-central-directory comment replaced by a valid
// seal, or empty when there is no such record at the end.
std::vector<uint8_t> resealed(const uint8_t* data, size_t size) {
  if (size < kEocdSize) return {};
  const size_t max_comment = std::min<size_t>(size - kEocdSize, 0xffff);
  for (size_t comment = 0; comment <= max_comment; ++comment) {
    const size_t pos = size - kEocdSize - comment;
    if (std::memcmp(data + pos, "PK\x05\x06", 4) != 0) continue;
    if ((data[pos + 20] | (data[pos + 21] << 8)) != static_cast<int>(comment)) continue;
    std::vector<uint8_t> out(data, data + pos + 20);
    char seal[64];
    const unsigned long crc = crc32(crc32(0L, Z_NULL, 0), out.data(), static_cast<uInt>(out.size()));
    const int n = std::snprintf(seal, sizeof seal, "ddp-worker crc32=%08lx", crc);
    out.push_back(static_cast<uint8_t>(n & 0xff));
    out.push_back(static_cast<uint8_t>(n >> 8));
    out.insert(out.end(), seal, seal + n);
    return out;
  }
  return {};
}

// LibTorch 1.13's Unpickler reserves and fills a string's declared length
// before it finds the archive too short: a damaged 1 KB file whose string
// says 2 GB costs 2 GB of memory and seconds, then ends in a CheckpointError
// ("Unexpected end of pickler archive"). That is LibTorch's (docs/testing.md,
// Fuzzing); inputs whose pickle (the first zip entry, archive/data.pkl,
// stored uncompressed) declares a string (BINUNICODE: 'X' and a 4-byte
// length, the only long string opcode torch.save writes) longer than the
// whole file are skipped, so the fuzzer spends its time on the rest. The
// same for LONG_BINPUT ('r' and a 4-byte memo index): the Unpickler grows its
// memo to that index (74541155 entries of 32 bytes: 2.4 GB, seen), and a
// real pickle never has more memo entries than bytes. (A byte 'X' or 'r'
// that is an argument of another opcode can skip an input needlessly; that
// costs only that input.)
bool declares_impossible_length(const uint8_t* data, size_t size) {
  auto le = [&](size_t at, int bytes) {
    uint32_t v = 0;
    for (int b = bytes - 1; b >= 0; --b) v = (v << 8) | data[at + static_cast<size_t>(b)];
    return v;
  };
  if (size < 30 || std::memcmp(data, "PK\x03\x04", 4) != 0) return false;
  const size_t begin = 30 + size_t{le(26, 2)} + le(28, 2);
  // torch.save writes sizes after the data (a data descriptor): then the
  // entry runs up to the next local header.
  const uint8_t header[4] = {'P', 'K', 3, 4};
  const size_t next = static_cast<size_t>(std::search(data + std::min(begin, size), data + size, header, header + 4) - data);
  const size_t end = le(18, 4) == 0 ? next : std::min<size_t>(size, begin + le(18, 4));
  for (size_t i = begin; i + 5 <= end; ++i)
    if ((data[i] == 'X' || data[i] == 'r') && le(i + 1, 4) > size) return true;
  return false;
}

void read_both_ways(const std::string& path) {
  try {
    (void)ddp::worker::load_checkpoint(path);
  } catch (const ddp::worker::CheckpointError&) {
  }
  try {
    (void)ddp::worker::load_weights(path);
  } catch (const ddp::worker::CheckpointError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (declares_impossible_length(data, size)) return -1;  // -1: not added to the corpus
  static ddp::fuzz::ScratchFile file("ddp-fuzz-checkpoint");
  read_both_ways(file.write(data, size));
  const std::vector<uint8_t> sealed = resealed(data, size);
  if (!sealed.empty()) read_both_ways(file.write(sealed.data(), sealed.size()));
  return 0;
}
