#include "ddp/launcher/process/shm_segments.h"

#include "ddp/common/shm_name.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ddp::launcher {

int remove_worker_segments(const std::set<pid_t>& pids, const char* dir) {
  if (pids.empty()) return 0;
  DIR* d = ::opendir(dir);
  if (!d) return 0;
  const int dfd = ::dirfd(d);
  const uid_t me = ::geteuid();
  int removed = 0;
  while (const dirent* e = ::readdir(d)) {
    const pid_t pid = shm_segment_pid(e->d_name);
    if (pid == 0 || pids.count(pid) == 0) continue;
    struct stat st {};
    if (::fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode) || st.st_uid != me) continue;  // not a segment we made
    if (::unlinkat(dfd, e->d_name, 0) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

}  // namespace ddp::launcher
