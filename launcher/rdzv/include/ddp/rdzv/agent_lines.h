#pragma once
// The lines between ddp-launch and its rendezvous helper ddp-rdzv, one a
// message, over the helper's stdin and stdout. Both sides compile this one
// header (ddp-rdzv's main.cpp, the launcher's elastic/rdzv_agent.cpp), so a
// change to a line changes both. Header-only and free of Boost: the
// launcher includes nothing else of launcher/rdzv.
//
// launcher -> helper:
//   join [<port>]   -> round <round> <restart_count> <group_rank> <group_world_size>
//                            <base_rank> <world_size> <master_addr> <master_port> [<replaced>]
//                            [recovery=<generation>,<used>]  (a hot spare in a
//                            lost node's place in the running round)
//                      | error <message>
//                      | finished <message>  (a hot spare the job did not need: it ended)
//                      (port: the workers' store the launcher has bound,
//                      the round's master_port if it is node rank 0)
//   fail <reason>   -> restart <counted 0|1> <reason>   (the round's first reason)
//   abort <reason>  -> aborted
//   done            -> finished [<what cut the exit barrier short>]
//   steps <payload> -> job_steps <every node's payload, '|' between>
//                      (while the workers run: the step statistics the
//                      launchers compare across nodes; Rendezvous::share_steps)
//   recover <budget> <rank>
//                   -> recovery <generation> <used>
//                      | recovery_refused <used_up 0|1> <used> <reason>
//                      (in-place recovery of a rank lost on this node:
//                      the job-wide generation, and the restarts and
//                      recoveries of the job before it; refused while
//                      another node's recovery runs, or once <used> reaches
//                      <budget>, --max_restarts: Rendezvous::recover)
//   recovered <generation>  (no answer: that recovery is over)
//   recovered void  (no answer: the launcher gave its granted recovery up
//                    before it began, a second failure first: it counts not)
//   ping            (no answer: the launcher is alive; it writes one every
//                    keep_alive_interval / 2 from its poll loops)
//   quit            (no answer: the helper exits)
// helper -> launcher, unasked while the workers run:
//   restart <counted> <reason> | abort <reason>
//   peer_recovery <generation> <used> <rank> <node>   (another node of the
//                   round began an in-place recovery of one of its ranks:
//                   this node's ranks re-form under <generation>)
// Reasons and messages are free text to the end of the line; a line break
// in one becomes a space (one_line).

#include <sstream>
#include <string>

namespace ddp::rdzv {

// One round of the rendezvous as the `round` line carries it.
struct Round {
  int round = 0;
  int restart_count = 0;
  int group_rank = 0;
  int group_world_size = 1;
  int base_rank = 0;            // global rank of this node's local rank 0
  int world_size = 1;
  std::string master_addr;
  int master_port = 0;
  // Hot spares that took the places of nodes of the last round that did
  // not come back: "<node rank>:<host>:<pid>:<host before>:<pid before>",
  // ',' between ("" none).
  std::string replaced;
  // A hot spare that took a lost node's place in this running round
  // (--recovery in_place): its ranks start as returning ranks under this
  // generation (0: none), and the job's restarts and recoveries before it.
  unsigned long long recovery_generation = 0;
  int recovery_used = 0;
};

namespace lines {

// Text made one line: '\n' and '\r' become spaces.
inline std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// ---- launcher -> helper -------------------------------------------------

enum class Command { Join, Fail, Abort, Done, Steps, Recover, Recovered, Ping, Quit, Unknown };

struct CommandLine {
  Command command = Command::Unknown;
  std::string arg;  // fail/abort: the reason; steps: the payload; join: the workers' store port
};

// join's argument: the port of the workers' store this node's launcher has
// bound for the round, published if the node is the round's node rank 0;
// 0 when absent or not a port (the helper then picks one for rank 0).
inline int join_port(const std::string& arg) {
  if (arg.empty() || arg.size() > 5 || arg.find_first_not_of("0123456789") != std::string::npos) return 0;
  const int port = std::stoi(arg);
  return port <= 65535 ? port : 0;
}

inline const char* command_word(Command c) {
  switch (c) {
    case Command::Join: return "join";
    case Command::Fail: return "fail";
    case Command::Abort: return "abort";
    case Command::Done: return "done";
    case Command::Steps: return "steps";
    case Command::Recover: return "recover";
    case Command::Recovered: return "recovered";
    case Command::Ping: return "ping";
    case Command::Quit: return "quit";
    case Command::Unknown: break;
  }
  return "";
}

// A command line, without its '\n'.
inline std::string format_command(Command c, const std::string& arg = "") {
  std::string line = command_word(c);
  if (!arg.empty()) line += " " + one_line(arg);
  return line;
}

inline CommandLine parse_command(const std::string& line) {
  const std::string word = line.substr(0, line.find(' '));
  CommandLine c;
  c.arg = line.size() > word.size() ? line.substr(word.size() + 1) : "";
  for (const Command k : {Command::Join, Command::Fail, Command::Abort, Command::Done, Command::Steps,
                          Command::Recover, Command::Recovered, Command::Ping, Command::Quit})
    if (word == command_word(k)) c.command = k;
  return c;
}

// ---- helper -> launcher -------------------------------------------------

enum class Answer {
  Round,
  Restart,
  Abort,
  Aborted,
  Finished,
  Error,
  JobSteps,
  Recovery,
  RecoveryRefused,
  PeerRecovery,
  Unexpected
};

// In-place recovery across nodes: recovery, recovery_refused and
// peer_recovery's numbers.
struct RecoveryLine {
  unsigned long long generation = 0;
  int used = 0;       // the job's restarts and recoveries before this one
  bool used_up = false;
  int rank = -1;      // peer_recovery: the global rank lost
};

struct AnswerLine {
  Answer answer = Answer::Unexpected;
  Round round;          // Round
  RecoveryLine recovery;  // Recovery, RecoveryRefused, PeerRecovery
  bool counted = true;  // Restart: counts against --max_restarts
  std::string text;     // Restart/Abort: the reason; Finished: the note; Error: the message;
                        // JobSteps: the payloads; RecoveryRefused: the reason;
                        // PeerRecovery: the node; Unexpected: the line
};

// Answer lines, without their '\n'.
inline std::string format_round(const Round& r) {
  return "round " + std::to_string(r.round) + " " + std::to_string(r.restart_count) + " " +
         std::to_string(r.group_rank) + " " + std::to_string(r.group_world_size) + " " + std::to_string(r.base_rank) +
         " " + std::to_string(r.world_size) + " " + one_line(r.master_addr) + " " + std::to_string(r.master_port) +
         (r.replaced.empty() ? "" : " " + one_line(r.replaced)) +
         (r.recovery_generation == 0
              ? ""
              : " recovery=" + std::to_string(r.recovery_generation) + "," + std::to_string(r.recovery_used));
}
inline std::string format_restart(bool counted, const std::string& reason) {
  return std::string("restart ") + (counted ? "1 " : "0 ") + one_line(reason);
}
inline std::string format_abort(const std::string& reason) { return "abort " + one_line(reason); }
inline std::string format_aborted() { return "aborted"; }
inline std::string format_finished(const std::string& note) { return "finished " + one_line(note); }
inline std::string format_error(const std::string& message) { return "error " + one_line(message); }
inline std::string format_job_steps(const std::string& payloads) { return "job_steps " + one_line(payloads); }
inline std::string format_recovery(unsigned long long generation, int used) {
  return "recovery " + std::to_string(generation) + " " + std::to_string(used);
}
inline std::string format_recovery_refused(bool used_up, int used, const std::string& reason) {
  return std::string("recovery_refused ") + (used_up ? "1 " : "0 ") + std::to_string(used) + " " + one_line(reason);
}
inline std::string format_peer_recovery(unsigned long long generation, int used, int rank, const std::string& node) {
  return "peer_recovery " + std::to_string(generation) + " " + std::to_string(used) + " " + std::to_string(rank) + " " +
         one_line(node);
}

inline AnswerLine parse_answer(const std::string& line) {
  AnswerLine a;
  std::istringstream in(line);
  std::string word;
  in >> word;
  auto rest = [&] {
    std::string r;
    std::getline(in, r);
    if (!r.empty() && r[0] == ' ') r.erase(0, 1);
    return r;
  };
  if (word == "round") {
    Round& r = a.round;
    if (in >> r.round >> r.restart_count >> r.group_rank >> r.group_world_size >> r.base_rank >> r.world_size >>
        r.master_addr >> r.master_port) {
      for (std::string w; in >> w;) {
        if (w.rfind("recovery=", 0) == 0) {
          std::istringstream g(w.substr(9));
          char comma = 0;
          if (!(g >> r.recovery_generation >> comma >> r.recovery_used) || comma != ',' || r.recovery_used < 0)
            r.recovery_generation = 0, r.recovery_used = 0;
        } else if (r.replaced.empty()) {
          r.replaced = w;
        }
      }
      a.answer = Answer::Round;
      return a;
    }
  } else if (word == "restart") {
    int counted = 1;
    if (in >> counted) {
      a.answer = Answer::Restart;
      a.counted = counted != 0;
      a.text = rest();
      return a;
    }
  } else if (word == "abort" || word == "error" || word == "finished" || word == "job_steps") {
    a.answer = word == "abort"      ? Answer::Abort
               : word == "error"    ? Answer::Error
               : word == "finished" ? Answer::Finished
                                    : Answer::JobSteps;
    a.text = rest();
    return a;
  } else if (word == "recovery") {
    RecoveryLine& r = a.recovery;
    if (in >> r.generation >> r.used && r.generation > 0 && r.used >= 0) {
      a.answer = Answer::Recovery;
      return a;
    }
  } else if (word == "recovery_refused") {
    int used_up = 0;
    if (in >> used_up >> a.recovery.used) {
      a.answer = Answer::RecoveryRefused;
      a.recovery.used_up = used_up != 0;
      a.text = rest();
      return a;
    }
  } else if (word == "peer_recovery") {
    RecoveryLine& r = a.recovery;
    if (in >> r.generation >> r.used >> r.rank && r.generation > 0 && r.rank >= 0) {
      a.answer = Answer::PeerRecovery;
      a.text = rest();
      return a;
    }
  } else if (word == "aborted") {
    a.answer = Answer::Aborted;
    return a;
  }
  a = AnswerLine{};
  a.text = line;
  return a;
}

}  // namespace lines
}  // namespace ddp::rdzv
