// The wheel's programs (DDP_WHEEL) run on glibc 2.28 and later, torch's own
// floor (their manylinux_2_28 tag; docs/building.md, Wheel), though Debian
// 12's toolchain builds them against glibc 2.36. The linker binds each call
// into glibc to the newest version of that symbol; this file, linked into
// each wheel program only, answers the calls whose newest version is past
// 2.28 itself and forwards them to the old version that glibc 2.28 has and
// every later glibc still exports:
//   - pthread_* and dl* (2.32/2.34: moved into libc.so.6), to their
//     libpthread.so.0 / libdl.so.2 versions; the programs list both
//     libraries as needed (CMakeLists.txt), so that glibc 2.28 loads them;
//   - stat, fstat, lstat, fstatat (2.33: real functions since), to
//     __xstat and friends, which they were before;
//   - __libc_start_main (2.34), which Debian 12's crt1 calls with no init
//     function: glibc 2.28 would then run none of the program's
//     constructors, so this one passes the program's own (what glibc 2.33's
//     __libc_csu_init did); later glibcs call it the same way;
//   - __libc_single_threaded (2.32), libstdc++'s hint that no thread was
//     started: always 0 here (libstdc++ then takes its atomic paths).
// All are hidden: only the program's own code (ours, the static libstdc++
// and Boost) calls them; the libraries it loads bind to glibc's as always.
// arc4random (2.36) is launcher/wheel/arc4random.cpp. A symbol missing here
// shows up as a newer tag in `auditwheel show` (tests/wheel).
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#define DDP_HIDDEN extern "C" __attribute__((visibility("hidden")))

// `name` in the program, forwarding to name@version in glibc.
#define DDP_FORWARD(ret, name, version, params, args)                 \
  extern "C" ret ddp_glibc_##name params;                             \
  __asm__(".symver ddp_glibc_" #name "," #name "@" version);          \
  DDP_HIDDEN ret name params { return ddp_glibc_##name args; }

DDP_FORWARD(int, pthread_create, "GLIBC_2.2.5",
            (pthread_t * thread, const pthread_attr_t* attr, void* (*start)(void*), void* arg),
            (thread, attr, start, arg))
DDP_FORWARD(int, pthread_join, "GLIBC_2.2.5", (pthread_t thread, void** result), (thread, result))
DDP_FORWARD(int, pthread_detach, "GLIBC_2.2.5", (pthread_t thread), (thread))
DDP_FORWARD(int, pthread_once, "GLIBC_2.2.5", (pthread_once_t * once, void (*init)()), (once, init))
DDP_FORWARD(int, pthread_condattr_setclock, "GLIBC_2.3.3", (pthread_condattr_t * attr, clockid_t clock),
            (attr, clock))
// Thread-specific data (Boost.Asio's call stack of the threads that run it).
DDP_FORWARD(int, pthread_key_create, "GLIBC_2.2.5", (pthread_key_t * key, void (*destructor)(void*)),
            (key, destructor))
DDP_FORWARD(int, pthread_key_delete, "GLIBC_2.2.5", (pthread_key_t key), (key))
DDP_FORWARD(void*, pthread_getspecific, "GLIBC_2.2.5", (pthread_key_t key), (key))
DDP_FORWARD(int, pthread_setspecific, "GLIBC_2.2.5", (pthread_key_t key, const void* value), (key, value))
DDP_FORWARD(int, pthread_sigmask, "GLIBC_2.2.5", (int how, const sigset_t* set, sigset_t* old), (how, set, old))
// dlopen finds the caller by its return address: a forwarder that tail-calls
// keeps the caller's, and the only callers are in the program itself anyway.
DDP_FORWARD(void*, dlopen, "GLIBC_2.2.5", (const char* file, int mode), (file, mode))
DDP_FORWARD(void*, dlsym, "GLIBC_2.2.5", (void* handle, const char* name), (handle, name))
DDP_FORWARD(int, dlclose, "GLIBC_2.2.5", (void* handle), (handle))

// Before glibc 2.33 stat() and friends were wrappers in libc_nonshared.a
// around these, which take the layout's version (1 on x86-64, _STAT_VER).
constexpr int kStatVersion = 1;
extern "C" int ddp_glibc_xstat(int, const char*, struct stat*);
extern "C" int ddp_glibc_lxstat(int, const char*, struct stat*);
extern "C" int ddp_glibc_fxstat(int, int, struct stat*);
extern "C" int ddp_glibc_fxstatat(int, int, const char*, struct stat*, int);
__asm__(".symver ddp_glibc_xstat,__xstat@GLIBC_2.2.5");
__asm__(".symver ddp_glibc_lxstat,__lxstat@GLIBC_2.2.5");
__asm__(".symver ddp_glibc_fxstat,__fxstat@GLIBC_2.2.5");
__asm__(".symver ddp_glibc_fxstatat,__fxstatat@GLIBC_2.4");
DDP_HIDDEN int stat(const char* path, struct stat* out) noexcept { return ddp_glibc_xstat(kStatVersion, path, out); }
DDP_HIDDEN int lstat(const char* path, struct stat* out) noexcept { return ddp_glibc_lxstat(kStatVersion, path, out); }
DDP_HIDDEN int fstat(int fd, struct stat* out) noexcept { return ddp_glibc_fxstat(kStatVersion, fd, out); }
DDP_HIDDEN int fstatat(int dir, const char* path, struct stat* out, int flags) noexcept {
  return ddp_glibc_fxstatat(kStatVersion, dir, path, out, flags);
}
// On x86-64 struct stat64 is struct stat, and the *64 names are aliases.
DDP_HIDDEN int stat64(const char* path, struct stat64* out) noexcept {
  return ddp_glibc_xstat(kStatVersion, path, reinterpret_cast<struct stat*>(out));
}
DDP_HIDDEN int lstat64(const char* path, struct stat64* out) noexcept {
  return ddp_glibc_lxstat(kStatVersion, path, reinterpret_cast<struct stat*>(out));
}
DDP_HIDDEN int fstat64(int fd, struct stat64* out) noexcept {
  return ddp_glibc_fxstat(kStatVersion, fd, reinterpret_cast<struct stat*>(out));
}
DDP_HIDDEN int fstatat64(int dir, const char* path, struct stat64* out, int flags) noexcept {
  return ddp_glibc_fxstatat(kStatVersion, dir, path, reinterpret_cast<struct stat*>(out), flags);
}

extern "C" {
__attribute__((visibility("hidden"))) char __libc_single_threaded = 0;
}

// The program's constructors, as glibc's old __libc_csu_init ran them: the
// .init section, then .init_array (.preinit_array is the dynamic loader's).
using InitFn = void (*)(int, char**, char**);
DDP_HIDDEN void _init();
DDP_HIDDEN InitFn __init_array_start[];
DDP_HIDDEN InitFn __init_array_end[];

namespace {
void run_constructors(int argc, char** argv, char** envp) {
  _init();
  for (InitFn* f = __init_array_start; f != __init_array_end; ++f) (*f)(argc, argv, envp);
}
}  // namespace

using MainFn = int (*)(int, char**, char**);
extern "C" int ddp_glibc_libc_start_main(MainFn, int, char**, InitFn, void (*)(), void (*)(), void*);
__asm__(".symver ddp_glibc_libc_start_main,__libc_start_main@GLIBC_2.2.5");
DDP_HIDDEN int __libc_start_main(MainFn main, int argc, char** argv, InitFn /*init: null*/, void (*)() /*fini*/,
                                 void (*rtld_fini)(), void* stack_end) {
  return ddp_glibc_libc_start_main(main, argc, argv, run_constructors, nullptr, rtld_fini, stack_end);
}
