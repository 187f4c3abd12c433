#include "ddp/launcher/diagnose/flight_recorder.h"

#include <algorithm>
#include <dirent.h>
#include <sstream>
#include <sys/stat.h>

namespace ddp::launcher {

namespace {

std::pair<std::string, std::string> split(const std::string& prefix) {
  const auto slash = prefix.rfind('/');
  if (slash == std::string::npos) return {".", prefix};
  return {slash == 0 ? "/" : prefix.substr(0, slash), prefix.substr(slash + 1)};
}

}  // namespace

std::vector<DumpFile> list_flight_recorder_files(const std::string& prefix) {
  std::vector<DumpFile> out;
  if (prefix.empty()) return out;
  const auto [dir, stem] = split(prefix);
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= stem.size() || name.compare(0, stem.size(), stem) != 0) continue;
    const std::string path = (dir == "/" ? "" : dir) + "/" + name;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    out.push_back({path, static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec});
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const DumpFile& a, const DumpFile& b) { return a.path < b.path; });
  return out;
}

std::vector<std::string> new_dumps(const std::vector<DumpFile>& before, const std::vector<DumpFile>& after) {
  std::vector<std::string> out;
  for (const DumpFile& f : after)
    if (std::find(before.begin(), before.end(), f) == before.end()) out.push_back(f.path);
  return out;
}

std::string format_flight_recorder_block(const std::vector<std::string>& dumps, const std::string& prefix) {
  if (dumps.empty()) return "";
  const auto [dir, stem] = split(prefix);
  std::ostringstream s;
  s << "Flight recorder dumps (each rank's last collectives; read them with `torchfrtrace " << dir << " --prefix "
    << stem << "`):\n";
  for (const std::string& f : dumps) s << "  " << f << "\n";
  return s.str();
}

}  // namespace ddp::launcher
