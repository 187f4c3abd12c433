// A worker for the stderr scenarios (test_stderr_tail.cpp): what reaches the
// launcher through a worker's fd 2, driven by argv.
//   throw TEXT        uncaught std::runtime_error(TEXT): libstdc++'s
//                     terminate handler prints it, then SIGABRT
//   progress DIR      "\r step i/3" without newlines; before each next one
//                     it waits (10 s at most) for DIR/go<i>, which the test
//                     makes once it has seen the previous one on the console
//   flood BYTES       BYTES of numbered lines to fd 2, then exits 0 at once
//   tty DIR           writes DIR/tty: "isatty=0|1 cols=C rows=R"; when fd 2 is
//                     a terminal, resizes its controlling terminal (/dev/tty)
//                     to 99 columns and waits (10 s at most) to see that on
//                     fd 2 ("followed=0|1" appended); then colour and \r bytes
#include <chrono>
#include <functional>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <string>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace {

void put(const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(2, s.data() + done, s.size() - done);
    if (n <= 0) _exit(3);
    done += static_cast<size_t>(n);
  }
}

bool wait_for(const std::function<bool()>& cond) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return cond();
}

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

void write_file(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) _exit(4);
  std::fputs(text.c_str(), f);
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const std::string mode = argv[1], arg = argv[2];
  if (mode == "throw") throw std::runtime_error(arg);
  if (mode == "progress") {
    for (int i = 1; i <= 3; ++i) {
      if (i > 1 && !wait_for([&] { return exists(arg + "/go" + std::to_string(i - 1)); })) {
        put("\nprogress: the launcher did not pass on step " + std::to_string(i - 1) + " within 10 s\n");
        return 1;
      }
      put("\r step " + std::to_string(i) + "/3");
    }
    put("\n");
    return 0;
  }
  if (mode == "flood") {
    const size_t bytes = std::stoul(arg);
    std::string all;
    for (size_t i = 0; all.size() < bytes; ++i) {
      char line[64];
      std::snprintf(line, sizeof line, "flood line %08zu ................................\n", i);
      all += line;
    }
    all.resize(bytes);
    put(all);
    return 0;
  }
  if (mode == "tty") {
    winsize ws{};
    const bool tty = ::isatty(2);
    if (tty) ::ioctl(2, TIOCGWINSZ, &ws);
    std::string result = "isatty=" + std::to_string(tty) + " cols=" + std::to_string(ws.ws_col) +
                         " rows=" + std::to_string(ws.ws_row);
    if (tty) {
      const int ctty = ::open("/dev/tty", O_RDWR | O_NOCTTY);
      bool followed = false;
      if (ctty >= 0) {
        winsize big = ws;
        big.ws_col = 99;
        ::ioctl(ctty, TIOCSWINSZ, &big);
        followed = wait_for([] {
          winsize now{};
          return ::ioctl(2, TIOCGWINSZ, &now) == 0 && now.ws_col == 99;
        });
        ::close(ctty);
      }
      result += " followed=" + std::to_string(followed);
    }
    write_file(arg + "/tty", result);
    put("\033[32mgreen\033[0m\r 50%\r100%\n");
    return 0;
  }
  return 2;
}
