#pragma once
// A temp directory for the launcher's unit tests, removed with everything in
// it at the end of the case; make() writes a file into it with a mode (a
// script, a program that is or is not executable).

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace ddp::test {

struct ScratchDir {
  std::string dir;
  ScratchDir() {
    char t[] = "/tmp/ddp-unit-XXXXXX";
    dir = ::mkdtemp(t);
  }
  ~ScratchDir() { std::filesystem::remove_all(dir); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string make(const std::string& name, const std::string& content, mode_t mode) {
    std::string p = dir + "/" + name;
    std::ofstream(p, std::ios::binary) << content;
    ::chmod(p.c_str(), mode);
    return p;
  }
};

}  // namespace ddp::test
