// The pure half of stack_dump.h: signatures out of the tools' text, and the
// one-line-per-group summary.
#include "ddp/launcher/diagnose/stack_dump.h"

#include "ddp/launcher/base/rank_list.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>

namespace ddp::launcher {

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// s[i] is a '<' of an operator's name (operator<, operator<<, operator<=).
bool operator_char(const std::string& s, size_t i) {
  const std::string before = s.substr(0, i);
  auto ends = [&](const char* t) {
    const size_t n = std::char_traits<char>::length(t);
    return before.size() >= n && before.compare(before.size() - n, n, t) == 0;
  };
  return ends("operator") || ends("operator<");
}

// gdb: "NAME (args) at file:line" / "?? ()": the name ends at the first
// " (" outside brackets (demangled types such as "void (int)" sit inside <>).
std::string cut_gdb_args(const std::string& s) {
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '<' && operator_char(s, i)) continue;
    if (c == '<' || c == '(' || c == '[' || c == '{') {
      if (c == '(' && depth == 0 && i > 0 && s[i - 1] == ' ') return s.substr(0, i - 1);
      ++depth;
    } else if ((c == '>' || c == ')' || c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return s;
}

// Template arguments out: "std::vector<int>::push_back" -> "std::vector::push_back".
// '<' of an operator name (operator<, operator<<, operator->) is kept.
std::string strip_templates(const std::string& s) {
  std::string out;
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '<' && depth == 0 && operator_char(out, out.size())) {
      out += c;
      continue;
    }
    if (c == '<') {
      ++depth;
      continue;
    }
    if (c == '>' && depth > 0) {
      --depth;
      continue;
    }
    if (depth == 0) out += c;
  }
  return out;
}

// "f(int, char**) const" -> "f".
std::string strip_params(std::string s) {
  for (const char* suffix : {" const", " volatile", " &&", " &"})
    while (s.size() > std::string(suffix).size() && s.compare(s.size() - std::string(suffix).size(), std::string::npos, suffix) == 0)
      s.erase(s.size() - std::string(suffix).size());
  if (s.empty() || s.back() != ')') return s;
  int depth = 0;
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] == ')') ++depth;
    else if (s[i] == '(' && --depth == 0) return i == 0 ? s : s.substr(0, i);
  }
  return s;
}

// The frame name as the signature shows it, "" for a frame to leave out.
std::string simplify(std::string name) {
  name = trim(name);
  if (name.empty() || starts_with(name, "??")) return "";
  const auto at = name.find('@');  // "pthread_cond_wait@@GLIBC_2.3.2"
  if (at != std::string::npos && at > 0) name.erase(at);
  for (std::string anon = "(anonymous namespace)::"; name.find(anon) != std::string::npos;)
    name.erase(name.find(anon), anon.size());
  name = trim(strip_params(strip_templates(name)));
  // A template's return type first ("bool std::operator<"): the name is the last word.
  const auto space = name.rfind(' ');
  if (space != std::string::npos) name = name.substr(space + 1);
  // Namespaces but the last: "ddp::worker::Reducer::finish" -> "Reducer::finish".
  size_t cut = std::string::npos, seen = 0;
  for (size_t i = name.size(); i-- > 1;)
    if (name[i] == ':' && name[i - 1] == ':' && ++seen == 2) {
      cut = i + 1;
      break;
    }
  if (cut != std::string::npos) name = name.substr(cut);
  if (name.find("::") == std::string::npos) {
    // glibc's aliases: "__GI___poll", "__nanosleep", "___pthread_cond_wait".
    if (starts_with(name, "__GI_")) name.erase(0, 5);
    name.erase(0, name.find_first_not_of('_') == std::string::npos ? 0 : name.find_first_not_of('_'));
    // libc's own frames under a wait, and every thread's entry frames.
    for (const char* internal : {"futex_abstimed_wait", "futex_wait", "pthread_cond_wait_common"})
      if (starts_with(name, internal)) return "";
    for (const char* entry : {"libc_start_call_main", "libc_start_main", "libc_start_main_impl", "start_thread",
                              "clone", "clone3", "start", "lll_lock_wait"})
      if (name == entry) return "";
  }
  return name;
}

std::string join_frames(const std::vector<std::string>& raw) {
  std::vector<std::string> frames;
  for (const std::string& r : raw) {
    const std::string f = simplify(r);
    if (f.empty() || (!frames.empty() && frames.back() == f)) continue;
    frames.push_back(f);
    if (static_cast<int>(frames.size()) == kSignatureFrames) break;
  }
  std::string out;
  for (const std::string& f : frames) out += (out.empty() ? "" : " <- ") + f;
  return out;
}

// The number after `key` in `line` ("TID 42:", "(LWP 42)"), -1 when absent.
long number_after(const std::string& line, const std::string& key) {
  const auto at = line.find(key);
  if (at == std::string::npos) return -1;
  size_t i = at + key.size();
  if (i >= line.size() || !std::isdigit(static_cast<unsigned char>(line[i]))) return -1;
  return std::stol(line.substr(i));
}

}  // namespace

std::string native_signature(const std::string& tool_output, pid_t pid) {
  std::istringstream in(tool_output);
  std::vector<std::string> frames;
  bool in_main = false, found = false;
  for (std::string line; std::getline(in, line);) {
    // A thread's block: eu-stack "TID 42:", gdb "Thread 1 (Thread 0x7f.. (LWP 42) "x"):"
    // or, without libthread_db, "Thread 1 (process 42 ...)".
    if (starts_with(line, "TID ") || starts_with(line, "Thread ")) {
      long tid = starts_with(line, "TID ") ? number_after(line, "TID ") : number_after(line, "(LWP ");
      if (tid < 0) tid = number_after(line, "(process ");
      if (found && in_main) break;
      in_main = tid == pid;
      found = found || in_main;
      continue;
    }
    if (!in_main || !starts_with(line, "#")) continue;
    // "#3  0x000055d0970656c8 name" (eu-stack), "#5  0x00007f.. in name (args) from lib",
    // "#0  name (args) at file:line" (gdb, an inlined or innermost frame).
    std::string rest = trim(line.substr(line.find_first_of(" \t") == std::string::npos ? line.size()
                                                                                         : line.find_first_of(" \t")));
    if (starts_with(rest, "0x")) {
      const auto sp = rest.find(' ');
      rest = sp == std::string::npos ? "" : trim(rest.substr(sp));
      if (starts_with(rest, "in ")) rest = rest.substr(3);
    }
    frames.push_back(cut_gdb_args(rest));
  }
  const std::string sig = join_frames(frames);
  // Frames, none named: the thread is in JIT code (oneDNN's kernels) or a
  // stripped library, where unwinding also stops.
  return sig.empty() && !frames.empty() ? kNoSymbols : sig;
}

std::string python_signature(const std::string& py_spy_output, pid_t pid) {
  // py-spy: 'Thread 5033 (idle): "MainThread"' then '    inner (sl.py:3)' per frame.
  std::map<std::string, std::vector<std::string>> by_thread;  // "tid:<n>" / "name:<s>"
  std::istringstream in(py_spy_output);
  std::vector<std::string>* cur = nullptr;
  std::vector<std::string>* named_main = nullptr;
  std::vector<std::string>* by_pid = nullptr;
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    if (starts_with(line, "Thread ")) {
      cur = &by_thread[std::to_string(n++)];
      if (number_after(line, "Thread ") == pid) by_pid = cur;
      if (line.find("\"MainThread\"") != std::string::npos) named_main = cur;
      continue;
    }
    if (!cur || !starts_with(line, "    ") || starts_with(line, "        ")) continue;  // locals are deeper
    std::string f = trim(line);
    // "func (path/to/file.py:12)" -> "func (file.py:12)"
    const auto open = f.rfind(" (");
    if (open != std::string::npos && f.back() == ')') {
      std::string where = f.substr(open + 2, f.size() - open - 3);
      const auto slash = where.rfind('/');
      if (slash != std::string::npos) where = where.substr(slash + 1);
      f = f.substr(0, open) + " (" + where + ")";
    }
    cur->push_back(f);
  }
  const std::vector<std::string>* main = by_pid ? by_pid : named_main;
  if (!main) return "";
  std::string out;
  for (int i = 0; i < static_cast<int>(main->size()) && i < kSignatureFrames; ++i)
    out += (out.empty() ? "" : " <- ") + (*main)[static_cast<size_t>(i)];
  return out;
}

namespace {

// Groups of ranks by key, the largest first (ties: the lowest rank first).
std::vector<std::pair<std::string, std::vector<int>>> grouped(const std::vector<std::pair<std::string, int>>& items) {
  std::map<std::string, std::vector<int>> by;
  for (const auto& [key, rank] : items) by[key].push_back(rank);
  std::vector<std::pair<std::string, std::vector<int>>> out(by.begin(), by.end());
  for (auto& g : out) std::sort(g.second.begin(), g.second.end());
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    if (a.second.size() != b.second.size()) return a.second.size() > b.second.size();
    return a.second.front() < b.second.front();
  });
  return out;
}

}  // namespace

std::string format_stack_summary(const std::vector<RankStacks>& stacks) {
  if (stacks.empty()) return "";
  std::vector<std::pair<std::string, int>> sigs, notes;
  for (const RankStacks& s : stacks) {
    sigs.emplace_back(s.signature.empty() ? "(no frames)" : s.signature, s.rank);
    std::istringstream in(s.note);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) notes.emplace_back(line, s.rank);
  }
  std::ostringstream out;
  for (const auto& [sig, ranks] : grouped(sigs)) out << "  " << ranks_text(ranks) << ": " << sig << "\n";
  for (const auto& [note, ranks] : grouped(notes))
    out << "  note" << (ranks.size() == stacks.size() ? "" : " (" + ranks_text(ranks) + ")") << ": " << note << "\n";
  // The files: one pattern when they differ only in the rank.
  std::string pattern;
  bool same = true;
  for (const RankStacks& s : stacks) {
    const std::string mark = ".rank_" + std::to_string(s.rank) + ".txt";
    const bool ends = s.file.size() > mark.size() && s.file.compare(s.file.size() - mark.size(), mark.size(), mark) == 0;
    const std::string p = ends ? s.file.substr(0, s.file.size() - mark.size()) + ".rank_*.txt" : s.file;
    if (s.file.empty() || (!pattern.empty() && p != pattern)) same = false;
    if (pattern.empty()) pattern = p;
  }
  if (same) {
    out << "  files: " << pattern << "\n";
  } else {
    for (const RankStacks& s : stacks)
      out << "  file (rank " << s.rank << "): " << (s.file.empty() ? "none written" : s.file) << "\n";
  }
  return out.str();
}

}  // namespace ddp::launcher
