// c10d rendezvous, the pure pieces: the helper's line protocol and the
// worker environment a round gives. The rendezvous itself runs against real
// processes in test_elastic.cpp and across network namespaces in
// tests/worker/test_multinode.cpp.
#include <catch2/catch.hpp>

#include "ddp/launcher/elastic/rdzv_agent.h"
#include "ddp/launcher/config/worker_env.h"
#include "ddp/rdzv/agent_lines.h"

using namespace ddp::launcher;
namespace lines = ddp::rdzv::lines;

TEST_CASE("every line between the launcher and ddp-rdzv parses back to what was formatted (agent_lines.h)") {
  using lines::Command;
  for (const Command c : {Command::Join, Command::Done, Command::Ping, Command::Quit}) {
    INFO(lines::command_word(c));
    const lines::CommandLine back = lines::parse_command(lines::format_command(c));
    CHECK(back.command == c);
    CHECK(back.arg.empty());
  }
  for (const Command c : {Command::Fail, Command::Abort, Command::Steps}) {
    INFO(lines::command_word(c));
    const lines::CommandLine back = lines::parse_command(lines::format_command(c, "rank 3 (local_rank 1)\nexited 1"));
    CHECK(back.command == c);
    CHECK(back.arg == "rank 3 (local_rank 1) exited 1");  // one line: the break is a space
  }
  CHECK(lines::parse_command("hello there").command == Command::Unknown);
  // join's port: the workers' store the launcher bound; anything else is none.
  CHECK(lines::join_port(lines::parse_command(lines::format_command(Command::Join, "41234")).arg) == 41234);
  for (const char* bad : {"", "0", "65536", "123456", "-1", "12ab", " 80"}) CHECK(lines::join_port(bad) == 0);

  ddp::rdzv::Round r;
  r.round = 3;
  r.restart_count = 1;
  r.group_rank = 2;
  r.group_world_size = 3;
  r.base_rank = 5;
  r.world_size = 9;
  r.master_addr = "10.0.0.7";
  r.master_port = 41234;
  CHECK(lines::format_round(r) == "round 3 1 2 3 5 9 10.0.0.7 41234");
  const lines::AnswerLine round = lines::parse_answer(lines::format_round(r));
  REQUIRE(round.answer == lines::Answer::Round);
  CHECK(round.round.round == 3);
  CHECK(round.round.restart_count == 1);
  CHECK(round.round.group_rank == 2);
  CHECK(round.round.group_world_size == 3);
  CHECK(round.round.base_rank == 5);
  CHECK(round.round.world_size == 9);
  CHECK(round.round.master_addr == "10.0.0.7");
  CHECK(round.round.master_port == 41234);
  CHECK(round.round.recovery_generation == 0);
  // A hot spare's takeover: its round carries the generation its ranks return under.
  r.replaced = "2:s:77:b:42";
  r.recovery_generation = 4;
  r.recovery_used = 1;
  CHECK(lines::format_round(r) == "round 3 1 2 3 5 9 10.0.0.7 41234 2:s:77:b:42 recovery=4,1");
  const lines::AnswerLine took = lines::parse_answer(lines::format_round(r));
  CHECK(took.round.replaced == "2:s:77:b:42");
  CHECK(took.round.recovery_generation == 4);
  CHECK(took.round.recovery_used == 1);
  for (const bool counted : {true, false}) {
    const lines::AnswerLine a = lines::parse_answer(lines::format_restart(counted, "node h2 left\r\n"));
    CHECK(a.answer == lines::Answer::Restart);
    CHECK(a.counted == counted);
    CHECK(a.text == "node h2 left  ");
  }
  const std::pair<std::string, lines::Answer> texts[] = {
      {lines::format_abort("no restarts left"), lines::Answer::Abort},
      {lines::format_finished("the other nodes did not finish"), lines::Answer::Finished},
      {lines::format_error("rendezvous at h:1: 1/2 nodes joined"), lines::Answer::Error},
      {lines::format_job_steps("h1 0 1 2|h2 0 1 2"), lines::Answer::JobSteps}};
  for (const auto& [line, answer] : texts) {
    INFO(line);
    const lines::AnswerLine a = lines::parse_answer(line);
    CHECK(a.answer == answer);
    CHECK(a.text == line.substr(line.find(' ') + 1));
  }
  CHECK(lines::parse_answer(lines::format_aborted()).answer == lines::Answer::Aborted);
  CHECK(lines::parse_answer(lines::format_finished("")).text.empty());
  CHECK(lines::parse_answer("hello").answer == lines::Answer::Unexpected);
}

TEST_CASE("the rendezvous helper's lines parse into events, and anything else is an error that quotes it") {
  RdzvEvent r = parse_rdzv_line("round 3 1 2 3 5 9 10.0.0.7 41234");
  REQUIRE(r.kind == RdzvEvent::Round);
  CHECK(r.round == 3);
  CHECK(r.restart_count == 1);
  CHECK(r.placement.group_rank == 2);
  CHECK(r.placement.group_world_size == 3);
  CHECK(r.placement.base_rank == 5);
  CHECK(r.placement.world_size == 9);
  CHECK(r.placement.master_addr == "10.0.0.7");
  CHECK(r.master_port == 41234);
  RdzvEvent s = parse_rdzv_line("restart 0 node h2 (pid 7) is waiting to join");
  CHECK(s.kind == RdzvEvent::Restart);
  CHECK(!s.counted);
  CHECK(s.text == "node h2 (pid 7) is waiting to join");
  CHECK(parse_rdzv_line("restart 1 rank 3 failed").counted);
  CHECK(parse_rdzv_line("abort no restarts left").kind == RdzvEvent::Abort);
  CHECK(parse_rdzv_line("aborted").kind == RdzvEvent::Aborted);
  RdzvEvent f = parse_rdzv_line("finished ");
  CHECK(f.kind == RdzvEvent::Finished);
  CHECK(f.text.empty());
  CHECK(parse_rdzv_line("error rendezvous at h:1: 1/2 nodes joined after 3 s").text ==
        "rendezvous at h:1: 1/2 nodes joined after 3 s");
  for (const char* bad : {"round 1 2", "restart x", "hello", ""}) {
    INFO(bad);
    RdzvEvent e = parse_rdzv_line(bad);
    CHECK(e.kind == RdzvEvent::Error);
    CHECK_THAT(e.text, Catch::Contains("unexpected") && Catch::Contains(std::string("'") + bad + "'"));
  }
}

// Issue 51 item 3: a client of the store's protocol set the abort reason to
// terminal escapes; "stopping this node's workers:" and "error: the job was
// ended:" printed them raw (a title change, a cleared screen).
TEST_CASE("the helper's lines: store text has its control bytes escaped before any line prints it") {
  const RdzvEvent a = parse_rdzv_line("abort \x1b]0;pwned\x07\x1b[2Jnode n1 left");
  CHECK(a.kind == RdzvEvent::Abort);
  CHECK(a.text == "\\x1b]0;pwned\\x07\\x1b[2Jnode n1 left");
  CHECK(parse_rdzv_line("restart 1 rank 3 \x9b failed\r").text == "rank 3 \\x9b failed\\x0d");
  CHECK(parse_rdzv_line("error \x1b[2J").text == "\\x1b[2J");
  CHECK(parse_rdzv_line("\x1b[2J").text == "the rendezvous helper said something unexpected: '\\x1b[2J'");
}

TEST_CASE("a c10d round's placement sets the ranks, group and master, and nodes may run different counts") {
  LaunchOptions o;
  o.nnodes = 3;  // the options' own node count and rank are not used
  o.node_rank = 0;
  o.master_addr = "unused";
  GroupSpec g;
  g.opts = &o;
  g.nproc = 2;
  g.master_port = 41234;
  g.restart_count = 1;
  NodePlacement p;
  p.group_rank = 1;
  p.group_world_size = 2;
  p.base_rank = 3;  // node 0 runs 3 workers
  p.world_size = 5;
  p.master_addr = "10.0.0.7";
  g.placement = p;
  EnvMap env = worker_environment({}, g, 1, "e");
  CHECK(env["RANK"] == "4");
  CHECK(env["LOCAL_RANK"] == "1");
  CHECK(env["WORLD_SIZE"] == "5");
  CHECK(env["LOCAL_WORLD_SIZE"] == "2");
  CHECK(env["GROUP_RANK"] == "1");
  CHECK(env["GROUP_WORLD_SIZE"] == "2");
  CHECK(env["ROLE_RANK"] == "4");
  CHECK(env["ROLE_WORLD_SIZE"] == "5");
  CHECK(env["MASTER_ADDR"] == "10.0.0.7");
  CHECK(env["MASTER_PORT"] == "41234");
  CHECK(env["TORCHELASTIC_RESTART_COUNT"] == "1");
  CHECK(env["TORCHELASTIC_USE_AGENT_STORE"] == "False");
}
