// A program with the worker runtime's standby hook (worker/src/standby.cpp,
// compiled in) and nothing else: main says what it got, so test_standby.cpp
// sees what an adopted standby runs with. Prints "main argv=<args> RANK=<v>
// FOO=<v> STANDBY=<v>" on stdout ("-" for unset), "err" on stderr, and
// "extra" on the fd in TEST_EXTRA_FD when set.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

int main(int argc, char** argv) {
  auto env = [](const char* k) { const char* v = std::getenv(k); return std::string(v ? v : "-"); };
  std::string args;
  for (int i = 1; i < argc; ++i) args += (i > 1 ? " " : "") + std::string(argv[i]);
  std::printf("main argv=%s RANK=%s FOO=%s STANDBY=%s\n", args.c_str(), env("RANK").c_str(), env("FOO").c_str(),
              env("DDP_STANDBY_FD").c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "err\n");
  if (const char* fd = std::getenv("TEST_EXTRA_FD")) {
    if (::write(std::atoi(fd), "extra\n", 6) != 6) return 3;
  }
  return 0;
}
