#pragma once
// A rank's heartbeat: one page that the launcher creates and maps and the
// worker runtime maps and writes. ddp-launch makes it a sealed memfd
// (create_sealed: F_SEAL_SHRINK, so no process can truncate it and kill the
// ranks that map it with SIGBUS; no path another user could reach) and
// passes it to its worker as an inherited fd, DDP_HEARTBEAT_FILE naming it
// as /proc/self/fd/<n>; a plain file works too (create/attach by path). The
// worker records the sequence number, kind and size of the collective it is
// in or last finished, its training step, the time it spent blocked waiting
// for collectives, and two small rings of timed marks (each step's start,
// each collective's start and end) that the launcher reads at its own
// cadence for the straggler scores and the trace (launcher/watch/
// step_sampler.h). Writes are relaxed/release atomic stores into the shared
// mapping and a CLOCK_MONOTONIC read (vDSO, no system call) per mark: no
// lock on the hot path.
//
// Layout (version 2, native byte order, 64-bit fields; the file is one page;
// python/ddp_launch/heartbeat.py writes the same):
//     0 magic "DDPHB002"
//     8 pid of the writer (0 until a worker attached)
//    16 collective_started (1-based sequence number of the last collective
//       the rank entered, 0 = none)
//    24 collective_finished (the last it finished)
//    32 kind, 40 bytes of the last entered
//    48 step (the training step the rank is in, 0 before the first)
//    56 wait_ns: total ns the rank was blocked waiting for collectives
//    64 steps_marked: how many step marks were written
//    72 exiting_ns: when the worker's program had finished and it began to
//       exit (main returned, or the Python script ended), 0 before: a rank
//       that then dies of a signal died in its exit (a library's teardown)
//    80 recovery_capable: 1 once the worker's loop can recover in place
//       (docs/worker-runtime.md, "In-place recovery"); 0: a lost peer
//       means a full restart. Python ranks leave it 0.
//    88 recovery_generation: written by the launcher, 0 until then: G tells
//       the rank to leave the collective in flight and re-form its process
//       group under generation G (a lost peer is coming back)
//    96..127 free
//   128 step ring, kStepRing entries of {n + 1, step, start_ns, wait_ns at
//       start}: mark n (0-based) at entry n % kStepRing, n + 1 stored last
//       (release) and 0 while the entry is written
//  1664 collective ring, kCollectiveRing entries of {seq, kind << 56 | bytes,
//       start_ns, end_ns (0 until finished)}: collective seq at (seq - 1) %
//       kCollectiveRing, seq stored last (release) and 0 while written.
//       A reader that sees the same n + 1 (seq) before and after reading an
//       entry has a whole one.
// Times are CLOCK_MONOTONIC nanoseconds (the launcher's clock on the same
// machine).
// A worker without the runtime never attaches: pid stays 0, and the
// launcher falls back to other signs of progress (docs/errors.md).
// Owns its mapping (and, for a sealed page, its fd until close_fd()).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ddp {

enum class CollectiveKind : uint64_t {
  None = 0,
  Allreduce = 1,
  Broadcast = 2,
  Allgather = 3,
  Barrier = 4,
  ReduceScatter = 5,
  Other = 6,
};

// "allreduce", "broadcast", ...; "none" for None and unknown values.
const char* collective_kind_name(CollectiveKind k);

struct HeartbeatSnapshot {
  uint64_t pid = 0;  // the worker that attached, 0: none (yet)
  uint64_t collective_started = 0;
  uint64_t collective_finished = 0;
  CollectiveKind kind = CollectiveKind::None;  // of collective_started
  uint64_t bytes = 0;                          // of collective_started
  uint64_t step = 0;
  uint64_t wait_ns = 0;       // total time blocked waiting for collectives
  uint64_t steps_marked = 0;  // step marks written
  uint64_t exiting_ns = 0;    // its program had finished then (CLOCK_MONOTONIC), 0: not (yet)
  bool recovery_capable = false;     // the worker can recover in place (offset 80 holds 1)
  uint64_t recovery_generation = 0;  // the launcher's last generation for it, 0: none

  // In a collective it entered and has not finished.
  bool in_collective() const { return collective_started > collective_finished; }
  bool operator==(const HeartbeatSnapshot& o) const {
    return pid == o.pid && collective_started == o.collective_started &&
           collective_finished == o.collective_finished && step == o.step;
  }
  bool operator!=(const HeartbeatSnapshot& o) const { return !(*this == o); }
};

// A step's start, from the page's step ring.
struct StepMark {
  uint64_t step = 0;
  uint64_t start_ns = 0;  // CLOCK_MONOTONIC
  uint64_t wait_ns = 0;   // the rank's total wait when the step began
};

// A collective's start and end, from the page's collective ring.
struct CollectiveMark {
  uint64_t seq = 0;
  CollectiveKind kind = CollectiveKind::None;
  uint64_t bytes = 0;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
};

// CLOCK_MONOTONIC in nanoseconds, the clock of the page's marks.
uint64_t monotonic_ns();

class Heartbeat {
 public:
  static constexpr const char* kEnvVar = "DDP_HEARTBEAT_FILE";
  static constexpr int kStepRing = 48;
  static constexpr int kCollectiveRing = 76;

  // The launcher's side: creates `path` (new, mode 0600, one page of zeros
  // but the magic) and maps it. Throws std::runtime_error naming the path.
  static std::unique_ptr<Heartbeat> create(const std::string& path);
  // The launcher's side for its workers: a sealed memfd of one page (its
  // size can never change), mapped, its fd kept (close-on-exec: the spawn
  // passes it to one worker) until close_fd(). Throws std::runtime_error.
  static std::unique_ptr<Heartbeat> create_sealed();
  // "/proc/self/fd/<fd>": how DDP_HEARTBEAT_FILE names an inherited page.
  static std::string fd_path(int fd);
  // The worker's side: maps an existing heartbeat page read-write and
  // writes this process's pid into it. For fd_path(n) it uses the inherited
  // fd n, which must be a sealed page, and closes it (the mapping stays; the
  // worker's own children do not inherit it). Throws std::runtime_error
  // naming the path and what is wrong (missing, not a regular file, not
  // sealed, wrong size or magic).
  static std::unique_ptr<Heartbeat> attach(const std::string& path);

  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Writer (hot path): the rank enters collective `seq` (the caller counts
  // from 1), of `kind` and `bytes`; it finished collective `seq`; it is in
  // training step `step`.
  void collective_started(uint64_t seq, CollectiveKind kind, uint64_t bytes);
  void collective_finished(uint64_t seq);
  // The same for finishers on several threads (a backend's completion
  // callback and the waiting thread) and waits out of issue order: never
  // moves collective_finished back (a seq at or below it changes nothing).
  // Lock-free: a compare-exchange loop on the shared field.
  void collective_finished_at_least(uint64_t seq);
  // Also marks the step's start in the step ring.
  void set_step(uint64_t step);
  // The rank was blocked `ns` waiting for a collective (any thread).
  void add_wait_ns(uint64_t ns);
  // The worker's program has finished and the process begins to exit (the
  // first call's time stays).
  void mark_exiting();
  // In-place recovery (offsets 80 and 88): the worker says it can recover;
  // the launcher writes the generation a survivor must re-form under, which
  // the worker's collective waits watch (one relaxed-cost acquire load).
  void set_recovery_capable(bool capable);
  void set_recovery_generation(uint64_t generation);
  uint64_t recovery_generation() const;

  // Reader: a consistent-enough copy (each field is read atomically; kind
  // and bytes may belong to a newer collective than collective_started).
  HeartbeatSnapshot read() const;
  // The step marks from index `next` on (0-based, in writing order) that
  // are still in the ring, appended to `out`; `next` moves past them.
  // Returns how many marks were overwritten before they could be read.
  uint64_t read_steps(uint64_t& next, std::vector<StepMark>& out) const;
  // The finished collectives from sequence number `next` on, appended to
  // `out` in order, stopping at the first one not finished yet; `next`
  // moves past them. Returns how many were overwritten unread.
  uint64_t read_collectives(uint64_t& next, std::vector<CollectiveMark>& out) const;

  const std::string& path() const { return path_; }
  // A sealed page's fd (create_sealed), -1 once closed or for a file.
  int fd() const { return fd_; }
  void close_fd();

 private:
  void mark_end(uint64_t seq);

 public:
  struct Record;  // the page's layout (heartbeat.cpp)

 private:
  Heartbeat(std::string path, Record* rec, int fd = -1) : path_(std::move(path)), rec_(rec), fd_(fd) {}

  std::string path_;
  Record* rec_;
  int fd_ = -1;
};

}  // namespace ddp
