// The wheel's programs (DDP_WHEEL) run on any glibc from 2.28 on (their
// manylinux_2_28 tag; docs/building.md, Wheel; glibc_2_28.cpp beside this
// file answers the other calls into a newer glibc). Statically linked, GCC 12's
// libstdc++ pulls in std::random_device, whose default source calls
// arc4random, new in glibc 2.36: this definition, in the program itself,
// answers that call instead of glibc's, from the same kernel source
// (getrandom(2), glibc 2.25), so the programs do not need glibc 2.36.
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <sys/random.h>

extern "C" std::uint32_t arc4random() noexcept {
  std::uint32_t v = 0;
  std::size_t got = 0;
  while (got < sizeof(v)) {
    const ssize_t n = ::getrandom(reinterpret_cast<char*>(&v) + got, sizeof(v) - got, 0);
    if (n > 0) got += static_cast<std::size_t>(n);
    else if (n < 0 && errno != EINTR) std::abort();  // as glibc's: never a predictable value
  }
  return v;
}
