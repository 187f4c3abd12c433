/* The least a launcher can do, as the floor of launch overhead
 * (bench_launcher.py): min_launch N PROGRAM [ARGS...] posix_spawns N copies
 * of PROGRAM and waits for them; exit 0 when all exited 0. No environment,
 * no supervision, no report. */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

extern char **environ;

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: min_launch N PROGRAM [ARGS...]\n");
    return 2;
  }
  const int n = atoi(argv[1]);
  if (n < 1 || n > 1024) {
    fprintf(stderr, "min_launch: N '%s' must be 1..1024\n", argv[1]);
    return 2;
  }
  pid_t pids[1024];
  int rc = 0;
  for (int i = 0; i < n; ++i)
    if (posix_spawn(&pids[i], argv[2], NULL, NULL, argv + 2, environ) != 0) {
      perror("min_launch: posix_spawn");
      return 1;
    }
  for (int i = 0; i < n; ++i) {
    int status = 0;
    if (waitpid(pids[i], &status, 0) < 0 || status != 0) rc = 1;
  }
  return rc;
}
