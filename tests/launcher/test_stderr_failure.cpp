// failure_from_stderr (stderr_failure.h) on real outputs, captured on this
// machine (Debian 12) from /usr/bin/python3 (Python 3.11, torch 1.13), the
// torch 2.11 venv's python (scripts/install-torch2) and a g++ 12 program;
// and OutputTail (output_tail.h), the ring that keeps them.
#include "ddp/launcher/output/output_tail.h"
#include "ddp/launcher/report/report.h"
#include "ddp/launcher/diagnose/stderr_failure.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <unistd.h>

#include "scratch_dir.h"

using namespace ddp::launcher;

using namespace std::string_literals;

namespace {

// /usr/bin/python3 (3.11, torch 1.13): a ValueError three frames deep
const std::string kPlain = R"ERR(Traceback (most recent call last):
  File "/tmp/st-cap/plain.py", line 5, in <module>
    step(3)
  File "/tmp/st-cap/plain.py", line 4, in step
    return load(i)
           ^^^^^^^
  File "/tmp/st-cap/plain.py", line 2, in load
    raise ValueError("bad batch")
ValueError: bad batch
)ERR";

// /usr/bin/python3: `raise ... from e`, then another exception while handling it
const std::string kChained = R"ERR(Traceback (most recent call last):
  File "/tmp/st-cap/chained.py", line 6, in configure
    return parse(d)
           ^^^^^^^^
  File "/tmp/st-cap/chained.py", line 3, in parse
    return d["lr"]
           ~^^^^^^
KeyError: 'lr'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/tmp/st-cap/chained.py", line 11, in main
    configure({})
  File "/tmp/st-cap/chained.py", line 8, in configure
    raise RuntimeError("config has no learning rate") from e
RuntimeError: config has no learning rate

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/tmp/st-cap/chained.py", line 14, in <module>
    main()
  File "/tmp/st-cap/chained.py", line 13, in main
    raise OSError(5, "cannot write checkpoint")
OSError: [Errno 5] cannot write checkpoint
)ERR";

// torch 2.11's venv python: an exception while handling a KeyError
const std::string kDuring = R"ERR(Traceback (most recent call last):
  File "/tmp/st-cap/during.py", line 3, in f
    {}["x"]
    ~~^^^^^
KeyError: 'x'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/tmp/st-cap/during.py", line 6, in <module>
    f()
  File "/tmp/st-cap/during.py", line 5, in f
    1 / 0
    ~~^~~
ZeroDivisionError: division by zero
)ERR";

// /usr/bin/python3: logging and a c10d warning, '\r' progress without a newline, then a recursion 13 frames deep
const std::string kProgress = R"ERR(WARNING:root:epoch 1 starting
[W socket.cpp:601] [c10d] The client socket has failed to connect
)ERR" "\r" R"ERR(0%|| 0/3)ERR" "\r" R"ERR(33%|#| 1/3)ERR" "\r" R"ERR(66%|##| 2/3Traceback (most recent call last):
  File "/tmp/st-cap/interleaved.py", line 12, in <module>
    deep(12)
  File "/tmp/st-cap/interleaved.py", line 11, in deep
    return deep(n - 1)
           ^^^^^^^^^^^
  File "/tmp/st-cap/interleaved.py", line 11, in deep
    return deep(n - 1)
           ^^^^^^^^^^^
  File "/tmp/st-cap/interleaved.py", line 11, in deep
    return deep(n - 1)
           ^^^^^^^^^^^
  [Previous line repeated 9 more times]
  File "/tmp/st-cap/interleaved.py", line 10, in deep
    raise AssertionError("loss is nan at step 7")
AssertionError: loss is nan at step 7
)ERR";

// /usr/bin/python3: a forked child writing lines while the traceback is printed (trimmed: loader lines 3-9 and 17-398 left out)
const std::string kForked = R"ERR([W socket.cpp:558] [c10d] loader 0: connection to peer pending
[W socket.cpp:558] [c10d] loader 1: connection to peer pending
[W socket.cpp:558] [c10d] loader 2: connection to peer pending
Traceback (most recent call last):
  File "/tmp/st-cap/procnoise2.py", line 12, in <module>
[W socket.cpp:558] [c10d] loader 10: connection to peer pending
[W socket.cpp:558] [c10d] loader 11: connection to peer pending
    step()
  File "/tmp/st-cap/procnoise2.py", line 11, in step
    collate({"x": 1, "y": None})
[W socket.cpp:558] [c10d] loader 12: connection to peer pending
  File "/tmp/st-cap/procnoise2.py", line 9, in collate
    return batch["x"] + batch["y"]
           ~~~~~~~~~~~^~~~~~~~~~~~
[W socket.cpp:558] [c10d] loader 13: connection to peer pending
TypeError: unsupported operand type(s) for +: 'int' and 'NoneType'
[W socket.cpp:558] [c10d] loader 14: connection to peer pending
[W socket.cpp:558] [c10d] loader 15: connection to peer pending
[W socket.cpp:558] [c10d] loader 16: connection to peer pending
[W socket.cpp:558] [c10d] loader 399: connection to peer pending
)ERR";

// /usr/bin/python3, torch 1.13: init_process_group against a closed port
const std::string kTorch113 = R"ERR(Traceback (most recent call last):
  File "/tmp/st-cap/torchdist.py", line 2, in <module>
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:1", rank=0, world_size=2, timeout=__import__("datetime").timedelta(seconds=1))
  File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 761, in init_process_group
    default_pg = _new_process_group_helper(
                 ^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 862, in _new_process_group_helper
    pg = ProcessGroupGloo(prefix_store, group_rank, group_size, timeout=timeout)
         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
RuntimeError: Socket Timeout
)ERR";

// torch 2.11's venv python: the same
const std::string kTorch211 = R"ERR(Traceback (most recent call last):
  File "/tmp/st-cap/torchdist.py", line 2, in <module>
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:1", rank=0, world_size=2, timeout=__import__("datetime").timedelta(seconds=1))
  File "/root/.cache/ddp-launch/torch-2.11.0/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83, in wrapper
    return func(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^
  File "/root/.cache/ddp-launch/torch-2.11.0/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 97, in wrapper
    func_return = func(*args, **kwargs)
                  ^^^^^^^^^^^^^^^^^^^^^
  File "/root/.cache/ddp-launch/torch-2.11.0/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 1831, in init_process_group
    store, rank, world_size = next(rendezvous_iterator)
                              ^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/root/.cache/ddp-launch/torch-2.11.0/venv/lib/python3.11/site-packages/torch/distributed/rendezvous.py", line 232, in _tcp_rendezvous_handler
    store = _create_c10d_store(
            ^^^^^^^^^^^^^^^^^^^
  File "/root/.cache/ddp-launch/torch-2.11.0/venv/lib/python3.11/site-packages/torch/distributed/rendezvous.py", line 199, in _create_c10d_store
    return TCPStore(
           ^^^^^^^^^
torch.distributed.DistStoreError: Timed out after 2 seconds waiting for clients. 1/2 clients joined.
)ERR";

// torch 2.11's venv python after init_process_group (rank 1 of 2): its
// sys.excepthook prefixes each line of the traceback with "[rank1]: "
// (distributed_c10d.py, _distributed_excepthook), not the empty ones;
// another line of the worker's before it
const std::string kRankPrefixed = R"ERR(epoch 1 step 5 loss 0.31
[rank1]: Traceback (most recent call last):
[rank1]:   File "/tmp/st-cap/rankprefix.py", line 7, in load
[rank1]:     return cfg["lr"]
[rank1]:            ~~~^^^^^^
[rank1]: KeyError: 'lr'

[rank1]: The above exception was the direct cause of the following exception:

[rank1]: Traceback (most recent call last):
[rank1]:   File "/tmp/st-cap/rankprefix.py", line 10, in <module>
[rank1]:     load({})
[rank1]:   File "/tmp/st-cap/rankprefix.py", line 9, in load
[rank1]:     raise RuntimeError("config has no learning rate") from e
[rank1]: RuntimeError: config has no learning rate
)ERR";

// g++ 12 / libstdc++: throw std::runtime_error(...) out of main
const std::string kTerminate = R"ERR(terminate called after throwing an instance of 'std::runtime_error'
  what():  bad batch: index 7 out of range
)ERR";

// g++ 12 / libstdc++: a joinable std::thread destroyed
const std::string kNoActive = R"ERR(terminate called without an active exception
)ERR";

// /usr/bin/python3: a forked child writing 200000 lines flat out while the traceback is printed, so its
// lines land inside the traceback's (Python writes a line in pieces); whole noise lines left out
const std::string kMangled = R"ERR(Traceback (most recent call last):
  File "/tmp/st-cap/procnoise.py", line 9, in <module>
    [W ProcessGroupGloo.cpp:2810] Warning: loader 1952
collate({"x": 1, "y": None})[W ProcessGroupGloo.cpp:2810] Warning: loader 1953

  File "/tmp/st-cap/procnoise.py", line 8, in collate
    [W ProcessGroupGloo.cpp:2810] Warning: loader 2046
return batch["x"] + batch["y"][W ProcessGroupGloo.cpp:2810] Warning: loader 2047

 [W ProcessGroupGloo.cpp:2810] Warning: loader 2063
 [W ProcessGroupGloo.cpp:2810] Warning: loader 2064
 [W ProcessGroupGloo.cpp:2810] Warning: loader 2065
 [W ProcessGroupGloo.cpp:2810] Warning: loader 2066
 [W ProcessGroupGloo.cpp:2810] Warning: loader 2067
 [W ProcessGroupGloo.cpp:2810] Warning: loader 2068
 [W ProcessGroupGloo.cpp:2810] Warning: loader 2069
 [W ProcessGroupGloo.cpp:2810] Warning: loader 2070
 [W ProcessGroupGloo.cpp:2810] Warning: loader 2071
 [W ProcessGroupGloo.cpp:2810] Warning: loader 2072
 [W ProcessGroupGloo.cpp:2810] Warning: loader 2073
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2074
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2075
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2076
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2077
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2078
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2079
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2080
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2081
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2082
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2083
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2084
^[W ProcessGroupGloo.cpp:2810] Warning: loader 2085
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2086
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2087
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2088
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2089
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2090
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2091
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2092
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2093
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2094
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2095
~[W ProcessGroupGloo.cpp:2810] Warning: loader 2096

TypeError[W ProcessGroupGloo.cpp:2810] Warning: loader 2108
: [W ProcessGroupGloo.cpp:2810] Warning: loader 2109
unsupported operand type(s) for +: 'int' and 'NoneType'[W ProcessGroupGloo.cpp:2810] Warning: loader 2110
)ERR";

}  // namespace

TEST_CASE("stderr failure: a Python traceback gives its exception line and last frames") {
  const auto f = failure_from_stderr(kPlain);
  REQUIRE(f);
  CHECK(f->message == "ValueError: bad batch");
  CHECK(f->traceback ==
        "  File \"/tmp/st-cap/plain.py\", line 5, in <module>\n"
        "    step(3)\n"
        "  File \"/tmp/st-cap/plain.py\", line 4, in step\n"
        "    return load(i)\n"
        "           ^^^^^^^\n"
        "  File \"/tmp/st-cap/plain.py\", line 2, in load\n"
        "    raise ValueError(\"bad batch\")\n"
        "ValueError: bad batch");
}

TEST_CASE("stderr failure: a chain gives the last exception, naming the one it was raised while handling") {
  const auto f = failure_from_stderr(kChained);
  REQUIRE(f);
  CHECK(f->message == "OSError: [Errno 5] cannot write checkpoint");
  CHECK(f->traceback.rfind("(raised while handling: RuntimeError: config has no learning rate)\n", 0) == 0);
  CHECK(f->traceback.find("KeyError") == std::string::npos);
  const auto d = failure_from_stderr(kDuring);
  REQUIRE(d);
  CHECK(d->message == "ZeroDivisionError: division by zero");
  CHECK(d->traceback.rfind("(raised while handling: KeyError: 'x')\n", 0) == 0);
  // Cut right after the first separator: the cause's traceback is the last complete one.
  const std::string cut = kChained.substr(0, kChained.find("The above exception") + 90);
  const auto c = failure_from_stderr(cut);
  REQUIRE(c);
  CHECK(c->message == "KeyError: 'lr'");
  // The middle one names its cause.
  const std::string middle = kChained.substr(0, kChained.find("During handling"));
  const auto m = failure_from_stderr(middle);
  REQUIRE(m);
  CHECK(m->message == "RuntimeError: config has no learning rate");
  CHECK(m->traceback.rfind("(raised from: KeyError: 'lr')\n", 0) == 0);
}

TEST_CASE("stderr failure: other lines, carriage-return progress and a long recursion around the traceback") {
  const auto f = failure_from_stderr(kProgress);
  REQUIRE(f);
  CHECK(f->message == "AssertionError: loss is nan at step 7");
  // Shortened to its last frames; the repeat line is kept with its frame.
  CHECK(f->traceback.rfind("  ... 1 earlier frame\n", 0) == 0);
  CHECK(f->traceback.find("[Previous line repeated 9 more times]") != std::string::npos);
  CHECK(f->traceback.find("WARNING:root") == std::string::npos);
  const auto g = failure_from_stderr(kForked);
  REQUIRE(g);
  CHECK(g->message == "TypeError: unsupported operand type(s) for +: 'int' and 'NoneType'");
  CHECK(g->traceback.find("[W socket.cpp") == std::string::npos);
  CHECK(g->traceback.find("    step()\n") != std::string::npos);
  CHECK(g->traceback.find("    return batch[\"x\"] + batch[\"y\"]\n") != std::string::npos);
}

TEST_CASE("stderr failure: torch.distributed errors of torch 1.13 and 2.11") {
  const auto a = failure_from_stderr(kTorch113);
  REQUIRE(a);
  CHECK(a->message == "RuntimeError: Socket Timeout");
  const auto b = failure_from_stderr(kTorch211);
  REQUIRE(b);
  CHECK(b->message == "torch.distributed.DistStoreError: Timed out after 2 seconds waiting for clients. 1/2 clients joined.");
  CHECK(b->traceback.rfind("  ... 2 earlier frames\n", 0) == 0);
}

TEST_CASE("stderr failure: torch 2.x's [rankN]: prefix after init_process_group is read through") {
  const auto f = failure_from_stderr(kRankPrefixed);
  REQUIRE(f);
  CHECK(f->message == "RuntimeError: config has no learning rate");
  CHECK(f->traceback ==
        "(raised from: KeyError: 'lr')\n"
        "  File \"/tmp/st-cap/rankprefix.py\", line 10, in <module>\n"
        "    load({})\n"
        "  File \"/tmp/st-cap/rankprefix.py\", line 9, in load\n"
        "    raise RuntimeError(\"config has no learning rate\") from e\n"
        "RuntimeError: config has no learning rate");
  // Only the excepthook's own prefix: a line that merely starts with "[rank" stays as it is.
  CHECK_FALSE(failure_from_stderr("[rank]: Traceback (most recent call last):\n[rank]: ValueError: x\n"));
  CHECK_FALSE(failure_from_stderr("[rank1]:Traceback (most recent call last):\n[rank1]:ValueError: x\n"));
}

TEST_CASE("stderr failure: libstdc++'s terminate handler") {
  const auto f = failure_from_stderr(kTerminate);
  REQUIRE(f);
  CHECK(f->message == "std::runtime_error: bad batch: index 7 out of range");
  CHECK(f->traceback == "terminate called after throwing an instance of 'std::runtime_error'\n"
                        "  what():  bad batch: index 7 out of range");
  const auto g = failure_from_stderr(kNoActive);
  REQUIRE(g);
  CHECK(g->message == "terminate called without an active exception");
  // Whichever came last: a terminate after an old traceback, and the reverse.
  CHECK(failure_from_stderr(kPlain + kTerminate)->message == "std::runtime_error: bad batch: index 7 out of range");
  CHECK(failure_from_stderr(kTerminate + kPlain)->message == "ValueError: bad batch");
}

TEST_CASE("stderr failure: nothing to quote") {
  CHECK_FALSE(failure_from_stderr(""));
  CHECK_FALSE(failure_from_stderr("epoch 1 loss 0.3\nSegmentation fault\n"));
  // Killed while printing its traceback: no exception line, no message.
  CHECK_FALSE(failure_from_stderr(kPlain.substr(0, kPlain.find("ValueError: bad batch"))));
  // Mangled inside its exception line: nothing, and not an earlier, unrelated traceback either.
  CHECK_FALSE(failure_from_stderr(kMangled));
  CHECK_FALSE(failure_from_stderr(kPlain + "epoch 2\n" + kMangled));
  // "loss: 0.5" is not an exception line (not CapWords), an indented one is a frame's.
  CHECK_FALSE(failure_from_stderr("Traceback (most recent call last):\n  File \"x\", line 1\nloss: 0.5\n"));
}

TEST_CASE("stderr failure: colours of a terminal traceback are left out") {
  const std::string coloured =
      "Traceback (most recent call last):\n  File \033[35m\"t.py\"\033[0m, line \033[35m1\033[0m, in \033[35m<module>\033[0m\n"
      "\033[1;35mValueError\033[0m: \033[35mbad batch\033[0m\n";
  const auto f = failure_from_stderr(coloured);
  REQUIRE(f);
  CHECK(f->message == "ValueError: bad batch");
}

TEST_CASE("output tail: keeps the last bytes, starting at a line once it dropped some") {
  OutputTail t(16);
  CHECK(t.empty());
  t.append("abc\n", 4);
  CHECK(t.text() == "abc\n");
  t.append("0123456789\nxyz", 14);  // 18 bytes in all: "ab" is gone, and the rest of its line
  CHECK(t.text() == "0123456789\nxyz");
  t.append("\nlast\n", 6);
  CHECK(t.text() == "xyz\nlast\n");
  const std::string big(40, 'q');
  t.append(big.data(), big.size());
  CHECK(t.text() == "");  // 16 bytes of one line whose start is gone
  t.append("\nend", 4);
  CHECK(t.text() == "end");
  OutputTail exact(4);
  exact.append("ab\ncd", 4);
  CHECK(exact.text() == "ab\nc");
  // Byte by byte the same as at once.
  OutputTail a(8), b(8);
  const std::string s = "1\n22\n333\n4444\n55555\n";
  a.append(s.data(), s.size());
  for (char c : s) b.append(&c, 1);
  CHECK(a.text() == b.text());
  CHECK(a.text() == "55555\n");
  CHECK(a.total() == s.size());
  CHECK(b.total() == s.size());
}

TEST_CASE("output tail: the end of a file") {
  ddp::test::ScratchDir dir;
  const std::string path = dir.dir + "/stderr.log";
  std::ofstream(path) << "old line\n" << std::string(100, 'x') << "\nTraceback\n";
  CHECK(read_file_tail(path, 20) == "Traceback\n");
  CHECK(read_file_tail(path, 1000) == "old line\n" + std::string(100, 'x') + "\nTraceback\n");
  CHECK(read_file_tail(dir.dir + "/missing") == "");
  CHECK(read_file_tail(dir.dir) == "");  // a directory
}

TEST_CASE("report: a message quoted from stderr with its traceback below it, and an error file's message wins") {
  WorkerExit w;
  w.rank = 1;
  w.local_rank = 1;
  w.pid = 4242;
  w.code = 1;
  const auto f = failure_from_stderr(kPlain);
  REQUIRE(f);
  w.stderr_message = f->message;
  w.stderr_traceback = f->traceback;
  WorkerExit other = w;
  other.rank = 0;
  other.local_rank = 0;
  other.pid = 4241;
  other.stderr_message = "RuntimeError: Connection reset by peer";
  other.stderr_traceback.clear();
  AttemptResult a;
  a.exits = {w, other};
  a.root_cause = w;
  const std::string r = format_failure_report({a}, "h", 0);
  CHECK_THAT(r, Catch::Contains("  message    : ValueError: bad batch\n"
                                "  traceback  : (from its stderr; no error file)\n"
                                "      File \"/tmp/st-cap/plain.py\", line 5, in <module>\n"));
  CHECK_THAT(r, Catch::Contains("        raise ValueError(\"bad batch\")\n    ValueError: bad batch\n"));
  CHECK_THAT(r, Catch::Contains("rank 0 (local_rank 0, pid 4241): exit code 1\n    message: RuntimeError: Connection reset by peer\n"));
  a.root_cause->error = ddp::ErrorRecord{"KeyError: 'lr'", "", 0, std::nullopt};
  const std::string with_file = format_failure_report({a}, "h", 0);
  CHECK_THAT(with_file, Catch::Contains("  message    : KeyError: 'lr'\n"));
  CHECK_THAT(with_file, !Catch::Contains("from its stderr"));
}

TEST_CASE("report: control bytes of an exception line quoted from stderr are shown as hex escapes") {
  const std::string text =
      "Traceback (most recent call last):\n  File \"/t/x.py\", line 1, in <module>\n    boom()\n"
      "ValueError: bad\0byte \x07\x08\xff\x1b" "c tab\there\n"s;
  const auto f = failure_from_stderr(text);
  REQUIRE(f);
  WorkerExit w;
  w.rank = 0;
  w.pid = 4242;
  w.code = 1;
  w.stderr_message = f->message;
  w.stderr_traceback = f->traceback;
  AttemptResult a;
  a.exits = {w};
  a.root_cause = w;
  const std::string r = format_failure_report({a}, "h", 0);
  INFO(r);
  // ESC c (a terminal reset) is left out with the colour sequences; the rest is quoted.
  CHECK_THAT(r, Catch::Contains("  message    : ValueError: bad\\x00byte \\x07\\x08\\xff tab\there\n"));
  CHECK_THAT(r, Catch::Contains("\n    ValueError: bad\\x00byte \\x07\\x08\\xff tab\there\n"));
  CHECK(r.find('\0') == std::string::npos);
}
