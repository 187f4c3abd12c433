#include "ddp/launcher/config/command.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

namespace ddp::launcher {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_regular_file(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_directory(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

UsageError directory_error(const std::string& program) {
  return UsageError("program '" + program + "' is a directory; give the script or executable inside it");
}

bool is_executable_file(const std::string& p) { return is_regular_file(p) && ::access(p.c_str(), X_OK) == 0; }

std::string env_or(const EnvMap& env, const char* name, const std::string& fallback) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? fallback : it->second;
}

}  // namespace

std::string substitute_local_rank(const std::string& arg, int local_rank) {
  // Python's string.Template(arg).safe_substitute(local_rank=N), which
  // torchrun applies to every worker argument: "$$" is "$", "$local_rank"
  // and "${local_rank}" are N, anything else (other names, a lone "$",
  // "${ local_rank}") stays as written. Identifiers are [_A-Za-z][_A-Za-z0-9]*.
  if (arg.find('$') == std::string::npos) return arg;
  auto ident_start = [](char c) { return c == '_' || std::isalpha(static_cast<unsigned char>(c)); };
  auto ident_char = [](char c) { return c == '_' || std::isalnum(static_cast<unsigned char>(c)); };
  const std::string n = std::to_string(local_rank);
  std::string out;
  size_t i = 0;
  while (i < arg.size()) {
    if (arg[i] != '$') {
      out += arg[i++];
      continue;
    }
    if (i + 1 < arg.size() && arg[i + 1] == '$') {  // escaped
      out += '$';
      i += 2;
      continue;
    }
    const bool braced = i + 1 < arg.size() && arg[i + 1] == '{';
    size_t j = i + (braced ? 2 : 1);
    if (j < arg.size() && ident_start(arg[j])) {
      size_t k = j;
      while (k < arg.size() && ident_char(arg[k])) ++k;
      if (!braced || (k < arg.size() && arg[k] == '}')) {
        const size_t end = braced ? k + 1 : k;
        out += arg.compare(j, k - j, "local_rank") == 0 ? n : arg.substr(i, end - i);
        i = end;
        continue;
      }
    }
    out += '$';  // not a placeholder: kept
    ++i;
  }
  return out;
}

std::vector<std::string> WorkerCommand::argv_for(int local_rank) const {
  std::vector<std::string> out = args;
  if (legacy_local_rank)
    out.insert(out.begin() + static_cast<long>(local_rank_pos),
               (local_rank_dash ? "--local-rank=" : "--local_rank=") +
                   std::to_string(virtual_local_rank ? 0 : local_rank));
  for (auto& a : out) a = substitute_local_rank(a, virtual_local_rank ? 0 : local_rank);
  return out;
}

std::string find_executable(const std::string& name, const std::string& path_env) {
  if (name.find('/') != std::string::npos) return is_executable_file(name) ? name : "";
  size_t start = 0;
  for (;;) {
    size_t end = path_env.find(':', start);
    std::string dir = path_env.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (dir.empty()) dir = ".";
    std::string cand = dir + "/" + name;
    if (is_executable_file(cand)) return cand;
    if (end == std::string::npos) return "";
    start = end + 1;
  }
}

WorkerCommand resolve_command(const LaunchOptions& opts, const EnvMap& env) {
  WorkerCommand cmd;
  cmd.legacy_local_rank = !opts.use_env;
  cmd.local_rank_dash = opts.local_rank_dash;
  cmd.virtual_local_rank = opts.virtual_local_rank;
  const std::string path_env = env_or(env, "PATH", "/usr/local/bin:/usr/bin:/bin");
  const bool python = opts.module || opts.run_path || (!opts.no_python && ends_with(opts.program, ".py"));

  if (python) {
    const std::string interp = env_or(env, "PYTHON_EXEC", "python3");
    cmd.exe = find_executable(interp, path_env);
    if (cmd.exe.empty())
      throw UsageError("python interpreter '" + interp + "' not found on PATH; install python3 or set PYTHON_EXEC");
    cmd.args = {"-u"};
    if (opts.module) {
      cmd.args.insert(cmd.args.end(), {"-m", opts.program});
    } else {
      if (is_directory(opts.program)) throw directory_error(opts.program);
      if (!is_regular_file(opts.program))
        throw UsageError("program '" + opts.program + "' not found: no such script (check the path)");
      if (::access(opts.program.c_str(), R_OK) != 0)
        throw UsageError("program '" + opts.program + "' is not readable: " + std::strerror(errno));
      cmd.args.push_back(opts.program);
    }
  } else {
    cmd.exe = find_executable(opts.program, path_env);
    if (cmd.exe.empty()) {
      if (is_directory(opts.program)) throw directory_error(opts.program);
      const bool has_slash = opts.program.find('/') != std::string::npos;
      if (has_slash && is_regular_file(opts.program)) {
        std::string hint = ends_with(opts.program, ".py") && opts.no_python
                               ? " (with --no_python a .py script needs chmod +x and a #! line, or drop --no_python)"
                               : " (chmod +x it)";
        throw UsageError("program '" + opts.program + "' is not executable" + hint);
      }
      if (has_slash)
        throw UsageError("program '" + opts.program + "' not found: no such file");
      if (is_regular_file(opts.program))
        throw UsageError("program '" + opts.program + "' is not on PATH; did you mean ./" + opts.program + " ?");
      throw UsageError("program '" + opts.program + "' not found on PATH");
    }
  }
  cmd.local_rank_pos = cmd.args.size();
  cmd.args.insert(cmd.args.end(), opts.program_args.begin(), opts.program_args.end());
  return cmd;
}

namespace {

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool is_python(const std::string& path) { return base_name(path).rfind("python", 0) == 0; }

// The first of -S, -I, -E among a python's own options (those before the
// script, -m or -c), "" when none.
std::string site_option(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() < 2 || a[0] != '-' || a == "--") return "";
    if (a[1] == '-') continue;  // --version, --check-hash-based-pycs X: none of ours
    for (size_t k = 1; k < a.size(); ++k) {
      const char c = a[k];
      if (c == 'S' || c == 'I' || c == 'E') return std::string("-") + c;
      if (c == 'c' || c == 'm') return "";  // what follows is the program's
      if (c == 'W' || c == 'X') {           // takes a value: the rest, or the next argument
        if (k + 1 == a.size()) ++i;
        break;
      }
    }
  }
  return "";
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    size_t j = i;
    while (j < line.size() && !std::isspace(static_cast<unsigned char>(line[j]))) ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace

std::string python_site_skipped_by(const WorkerCommand& cmd) {
  if (is_python(cmd.exe)) return site_option(cmd.args);
  std::ifstream in(cmd.exe);
  std::string line;
  if (!std::getline(in, line) || line.rfind("#!", 0) != 0) return "";
  std::vector<std::string> w = words(line.substr(2));
  // `#!/usr/bin/env python3 -I` needs env -S to split; take both spellings.
  if (!w.empty() && base_name(w[0]) == "env") {
    w.erase(w.begin());
    if (!w.empty() && (w[0] == "-S" || w[0] == "--split-string")) w.erase(w.begin());
  }
  if (w.empty() || !is_python(w[0])) return "";
  return site_option(std::vector<std::string>(w.begin() + 1, w.end()));
}

std::string python_heartbeat_skipped_line(const std::string& flag) {
  // -S still reads PYTHONPATH, so the module can be imported by hand; -I
  // and -E ignore it too.
  return "ddp-launch: warning: --python_heartbeat: the workers' python runs with " + flag +
         ", which skips the sitecustomize that enables the heartbeat: these ranks write none, so no stall, "
         "straggler score or trace slice is seen for them; drop " + flag +
         (flag == "-S" ? ", or enable it in the script: import ddp_launch.heartbeat; ddp_launch.heartbeat.enable()"
                       : "");
}

}  // namespace ddp::launcher
