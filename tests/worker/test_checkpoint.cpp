// Checkpoints: round trip, Python reads the files, damaged files are refused
// with the file's name, and a SIGKILL during a save keeps the old file.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <csignal>
#include <dirent.h>
#include <fstream>
#include <map>
#include <sstream>

#include "ddp/worker/checkpoint.h"
#include "reference_python.h"
#include "test_support.h"
#include "worker_test_util.h"
#include "test_skip.h"

using namespace ddp::worker;
using ddp::test::TempDir;

namespace {

struct Small : torch::nn::Module {
  Small() {
    fc = register_module("fc", torch::nn::Linear(6, 3));
    bn = register_module("bn", torch::nn::BatchNorm1d(3));
  }
  torch::Tensor forward(torch::Tensor x) { return bn(fc(x)); }
  torch::nn::Linear fc{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};

void train_a_bit(Small& m, torch::optim::Optimizer& opt) {
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    m.forward(torch::randn({8, 6})).pow(2).mean().backward();
    opt.step();
  }
}

void write_bytes(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(data.data(), static_cast<std::streamsize>(data.size()));
}

// "T name numel sum" lines of read_torch_file.py -> name -> sum.
std::map<std::string, double> python_sums(const std::string& output) {
  std::map<std::string, double> sums;
  std::istringstream in(output);
  std::string kind, name;
  while (in >> kind) {
    if (kind == "T") {
      long long numel;
      double sum;
      in >> name >> numel >> sum;
      sums[name] = sum;
    } else {
      std::string rest;
      std::getline(in, rest);
      sums["#" + kind + (rest.empty() ? "" : rest)] = 0;
    }
  }
  return sums;
}

}  // namespace

TEST_CASE("checkpoint: round trip restores model, optimizer, counters, RNG and metrics") {
  TempDir dir;
  torch::manual_seed(3);
  auto m = std::make_shared<Small>();
  torch::optim::Adam opt(m->parameters(), torch::optim::AdamOptions(1e-2));
  train_a_bit(*m, opt);
  auto c = make_checkpoint(*m, &opt, 4, 123);
  c.metrics["val_loss"] = 0.25;
  c.strings["note"] = "best";
  save_checkpoint(dir.file("ck.pt"), c);
  auto after_save = torch::rand({5});  // what the RNG gives right after the snapshot

  torch::manual_seed(99);
  auto m2 = std::make_shared<Small>();
  torch::optim::Adam opt2(m2->parameters(), torch::optim::AdamOptions(1e-2));
  auto loaded = load_checkpoint(dir.file("ck.pt"));
  CHECK(loaded.epoch == 4);
  CHECK(loaded.step == 123);
  CHECK(loaded.metrics.at("val_loss") == 0.25);
  CHECK(loaded.strings.at("note") == "best");
  apply_checkpoint(loaded, *m2, &opt2);
  CHECK(torch::equal(torch::rand({5}), after_save));
  for (const auto& p : m->named_parameters()) CHECK(torch::equal(p.value(), m2->named_parameters()[p.key()]));
  for (const auto& b : m->named_buffers()) CHECK(torch::equal(b.value(), m2->named_buffers()[b.key()]));
  // Same optimizer state: one more identical step gives identical weights.
  torch::manual_seed(5);
  train_a_bit(*m, opt);
  torch::manual_seed(5);
  train_a_bit(*m2, opt2);
  CHECK(torch::allclose(m->fc->weight, m2->fc->weight, 0, 0));

  auto other = std::make_shared<torch::nn::LinearImpl>(6, 4);
  CHECK_THROWS_WITH(apply_checkpoint(loaded, *other), Catch::Contains("does not match the model"));
}

// What a rank sends another (issue 48): the file's bytes, with the extra
// tensors; damaged bytes are refused as a damaged file is.
TEST_CASE("checkpoint: to bytes and back, with extra tensors, equals the file's round trip") {
  TempDir dir;
  torch::manual_seed(3);
  auto m = std::make_shared<Small>();
  torch::optim::Adam opt(m->parameters(), torch::optim::AdamOptions(1e-2));
  train_a_bit(*m, opt);
  auto c = make_checkpoint(*m, &opt, 2, 40);
  c.metrics["x"] = 1.5;
  c.strings["s"] = "t";
  c.tensors["rng.rank_1"] = torch::arange(7, torch::kByte);
  const std::string bytes = checkpoint_to_bytes(c);
  save_checkpoint(dir.file("ck.pt"), c);
  CHECK(bytes == ddp::test::read_file(dir.file("ck.pt")));  // one format for both

  const auto back = checkpoint_from_bytes(bytes, "the state from rank 1");
  CHECK(back.epoch == 2);
  CHECK(back.step == 40);
  CHECK(back.optimizer == c.optimizer);
  CHECK(torch::equal(back.rng_state, c.rng_state));
  CHECK(back.metrics == c.metrics);
  CHECK(back.strings == c.strings);
  REQUIRE(back.tensors.size() == 1);
  CHECK(torch::equal(back.tensors.at("rng.rank_1"), c.tensors.at("rng.rank_1")));
  for (const auto& item : c.model) CHECK(torch::equal(back.model[item.key()], item.value()));
  // A file without extra tensors (as written before they existed) has none.
  c.tensors.clear();
  CHECK(checkpoint_from_bytes(checkpoint_to_bytes(c), "x").tensors.empty());

  std::string damaged = bytes;
  damaged[damaged.size() / 2] ^= 1;
  CHECK_THROWS_WITH(checkpoint_from_bytes(damaged, "the state from rank 1"),
                    Catch::Contains("checkpoint 'the state from rank 1' is corrupt: checksum mismatch"));
  CHECK_THROWS_WITH(checkpoint_from_bytes("", "the state from rank 1"),
                    Catch::Contains("checkpoint 'the state from rank 1' is empty"));
}

TEST_CASE("checkpoint: Python's torch.load reads the weights and the checkpoint") {
  DDP_REFERENCE_PYTHON_OR_SKIP(py);
  TempDir dir;
  torch::manual_seed(11);
  auto m = std::make_shared<Small>();
  save_weights_for_python(dir.file("w.pt"), *m);
  // The weights file loads the way users type it (torch.load(path): with
  // weights_only=True by default since 2.6) and with weights_only=True on
  // every version.
  for (const char* mode : {"default", "weights_only"}) {
    INFO("torch.load mode " << mode);
    auto r = ddp::test::run({py, ddp::test::source_path("tests/worker/read_torch_file.py"), dir.file("w.pt"), mode},
                            {}, 120);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("TYPE dict"));
    auto sums = python_sums(r.output);
    size_t n = 0;
    for (const auto& p : m->named_parameters()) {
      CHECK(sums.at(p.key()) == Approx(p.value().to(torch::kDouble).sum().item<double>()).epsilon(1e-12));
      ++n;
    }
    for (const auto& b : m->named_buffers()) {
      CHECK(sums.count(b.key()) == 1);
      ++n;
    }
    CHECK(n == 7);  // fc.weight/bias, bn.weight/bias, bn.running_mean/var/num_batches_tracked
  }

  auto c = make_checkpoint(*m, nullptr, 2, 17);
  c.tensors["rng.rank_1"] = torch::arange(5, torch::kByte);  // the optional extra tensors
  save_checkpoint(dir.file("ck.pt"), c);
  // The checkpoint (documented as torch.load(path, weights_only=False)).
  auto r2 = ddp::test::run({py, ddp::test::source_path("tests/worker/read_torch_file.py"), dir.file("ck.pt"), "full"},
                           {}, 120);
  INFO(r2.output);
  REQUIRE(r2.exit_code == 0);
  CHECK_THAT(r2.output, Catch::Contains("I epoch 2"));
  CHECK_THAT(r2.output, Catch::Contains("I step 17"));
  CHECK_THAT(r2.output, Catch::Contains("T model.fc.weight 18"));
  CHECK_THAT(r2.output, Catch::Contains("T tensors.rng.rank_1 5 10.0"));

  // And the other way: a plain dict saved by Python loads in C++.
  auto r3 = ddp::test::run({py, "-c",
                            "import torch,sys; torch.save({'a': torch.arange(6.).reshape(2,3), 'b': torch.ones(2)}, sys.argv[1])",
                            dir.file("py.pt")},
                           {}, 120);
  REQUIRE(r3.exit_code == 0);
  auto w = load_weights(dir.file("py.pt"));
  REQUIRE(w.size() == 2);
  CHECK(torch::equal(w["a"], torch::arange(6.).reshape({2, 3})));
}

TEST_CASE("checkpoint: missing, empty, truncated and corrupt files are refused naming the file") {
  TempDir dir;
  const std::string path = dir.file("ck.pt");
  CHECK_THROWS_WITH(load_checkpoint(path), Catch::Contains(path) && Catch::Contains("does not exist"));
  write_bytes(path, "");
  CHECK_THROWS_WITH(load_checkpoint(path), Catch::Contains(path) && Catch::Contains("empty"));
  write_bytes(path, "this is not a checkpoint at all");
  CHECK_THROWS_WITH(load_checkpoint(path), Catch::Contains(path) && Catch::Contains("corrupt"));

  torch::manual_seed(1);
  auto m = std::make_shared<Small>();
  save_checkpoint(path, make_checkpoint(*m, nullptr, 1, 1));
  const std::string good = ddp::test::read_file(path);
  REQUIRE(good.size() > 1000);

  // Every tenth of the file and the last bytes: truncation anywhere is caught.
  for (size_t cut : {good.size() / 10, good.size() / 2, good.size() * 9 / 10, good.size() - 22, good.size() - 1}) {
    INFO("truncated to " << cut << " of " << good.size());
    write_bytes(path, good.substr(0, cut));
    CHECK_THROWS_AS(load_checkpoint(path), CheckpointError);
    CHECK_THROWS_WITH(load_checkpoint(path), Catch::Contains(path));
  }
  // Flipped bytes across the file (headers, pickle, tensor data, directory):
  // never a crash, never a silent success.
  size_t rejected = 0, flips = 0;
  for (size_t off = 0; off < good.size(); off += good.size() / 40 + 1) {
    std::string bad = good;
    bad[off] = static_cast<char>(bad[off] ^ 0x5a);
    write_bytes(path, bad);
    ++flips;
    try {
      load_checkpoint(path);
    } catch (const CheckpointError& e) {
      ++rejected;
      CHECK_THAT(e.what(), Catch::Contains(path));
    }
  }
  INFO(rejected << " of " << flips << " corrupted copies rejected");
  CHECK(rejected == flips);

  // A weights-only file is not a checkpoint.
  save_weights_for_python(path, *m);
  CHECK_THROWS_WITH(load_checkpoint(path), Catch::Contains("load_weights"));
}

// Found by fuzzing (tests/fuzz/fuzz_checkpoint): this 1124-byte file (a
// weights file whose end-of-archive records were damaged) made
// torch::jit::pickle_load read outside its buffer: SIGSEGV in LibTorch 1.13's
// zip reader, in a release build too.
TEST_CASE("checkpoint: an archive whose records point outside the file is refused, not read out of bounds") {
  const std::string path = ddp::test::source_path("tests/fuzz/corpus/fuzz_checkpoint/crash-zip-records-out-of-bounds");
  CHECK_THROWS_WITH(load_weights(path), Catch::Contains(path) && Catch::Contains("corrupt"));
  CHECK_THROWS_AS(load_checkpoint(path), CheckpointError);
}

TEST_CASE("checkpoint: a process killed during a save leaves the previous checkpoint loadable") {
  TempDir dir;
  const std::string path = dir.file("ck.pt");
  auto tmp_exists = [&] {
    DIR* d = ::opendir(dir.path().c_str());
    bool found = false;
    while (auto* e = ::readdir(d))
      if (std::string(e->d_name).find(".tmp.") != std::string::npos) found = true;
    ::closedir(d);
    return found;
  };
  bool killed_mid_save = false;
  for (int attempt = 0; attempt < 5 && !killed_mid_save; ++attempt) {
    ddp::test::Proc p({ddp::test::helper_path(), "ckpt-loop", "path=" + path});
    // Wait until at least one checkpoint is complete and the next save has
    // begun writing its temp file, then kill without warning.
    REQUIRE(ddp::test::wait_until([&] { return ::access(path.c_str(), F_OK) == 0 && tmp_exists(); }, 60));
    p.signal(SIGKILL);
    REQUIRE(p.wait(30) == 128 + SIGKILL);
    killed_mid_save = tmp_exists();
    auto c = load_checkpoint(path);  // must not throw
    CHECK(c.epoch >= 1);
    CHECK(c.step == c.epoch * 10);
    auto w = c.model["weight"];
    CHECK(torch::equal(w, torch::full_like(w, static_cast<float>(c.epoch))));
    // Clear the leftover temp file before the next attempt.
    DIR* d = ::opendir(dir.path().c_str());
    while (auto* e = ::readdir(d))
      if (std::string(e->d_name).find(".tmp.") != std::string::npos) ::unlink((dir.path() + "/" + e->d_name).c_str());
    ::closedir(d);
  }
  CHECK(killed_mid_save);
}
