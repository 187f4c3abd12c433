#include "ddp/worker/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/torch.h>

#include <cerrno>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "ddp/common/atomic_file.h"
#include "ddp/worker/peer_failure.h"
#include "ddp/worker/process_group.h"

namespace ddp::worker {
namespace {

const char* const kFormat = "ddp-worker-checkpoint-v1";

std::string errno_text() { return std::strerror(errno); }

// torch::jit::pickle_save's archive, built here so that the zip goes into a
// buffer reserved at its final size (pickle_save grows its vector by
// doubling and returns it: for ddp-text's 51 MB checkpoint up to twice that
// in memory at once). `tagged`: pickle_save tags every dict and list with
// its element types (a call to torch.jit._pickle.restore_type_tag), which
// Python's torch.load refuses under weights_only=True, its default since
// 2.6; untagged is the archive torch.save writes for a plain dict of
// tensors, which torch.load(path) reads on every version (weights files).
// Same API in LibTorch 1.13 and 2.x.
std::vector<char> pickle_archive(const c10::IValue& value, bool tagged) {
  std::vector<char> pickled;
  torch::jit::Pickler pickler([&](const char* p, size_t n) { pickled.insert(pickled.end(), p, p + n); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr,
                              /*memoized_class_types=*/nullptr, /*get_tensor_id=*/nullptr,
                              /*tag_aggregates=*/tagged);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  size_t payload = pickled.size();
  for (const auto& t : pickler.tensorData()) payload += t.storage().nbytes();
  std::vector<char> archive;
  // Zip headers and alignment padding (64 bytes per record) on top.
  archive.reserve(payload + 1024 * (pickler.tensorData().size() + 8));
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* p, size_t n) {
    const char* b = static_cast<const char*>(p);
    archive.insert(archive.end(), b, b + n);
    return n;
  });
  torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  return archive;
}

void write_atomically(const std::string& path, const std::vector<char>& data, const char* what) {
  try {
    ddp::write_file_atomically(path, std::string_view(data.data(), data.size()));
  } catch (const ddp::AtomicWriteError& e) {
    throw CheckpointError(std::string("could not save ") + what + " '" + path + "': " + e.what() +
                          " (check that the directory exists, is writable and has space)");
  }
}

// Integrity seal. torch.save's zip reader does not notice a flipped byte in
// tensor data nor a few bytes cut off the end, so the writer puts a CRC-32 of
// everything before it into the zip's end-of-central-directory comment,
// where torch.load (Python or C++) ignores it. Any change to the file breaks
// either the zip structure or the CRC.
constexpr size_t kEocdSize = 22;  // end-of-central-directory record without comment
const char kEocdSignature[4] = {'P', 'K', 5, 6};
const std::string kSealPrefix = "ddp-worker crc32=";

uint32_t crc_of(const char* data, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (n > 0) {
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data), chunk);
    data += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

std::vector<char> seal(std::vector<char> zip) {
  if (zip.size() < kEocdSize || std::memcmp(zip.data() + zip.size() - kEocdSize, kEocdSignature, 4) != 0 ||
      zip[zip.size() - 1] != 0 || zip[zip.size() - 2] != 0)
    throw CheckpointError("internal error: torch::pickle_save did not produce a zip archive without comment");
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", crc_of(zip.data(), zip.size() - 2));
  const std::string comment = kSealPrefix + hex;
  zip[zip.size() - 2] = static_cast<char>(comment.size() & 0xff);
  zip[zip.size() - 1] = static_cast<char>(comment.size() >> 8);
  zip.insert(zip.end(), comment.begin(), comment.end());
  return zip;
}

// Checks the seal; `required` for checkpoints (always sealed), optional for
// weights files (Python writes them without one).
void verify_seal(const std::string& path, const std::vector<char>& data, const char* what, bool required) {
  const std::string file = std::string(what) + " '" + path + "'";
  // The EOCD is the last record: signature, then comment length at +20.
  const size_t max_comment = std::min<size_t>(data.size() >= kEocdSize ? data.size() - kEocdSize : 0, 0xffff);
  for (size_t comment = 0; comment <= max_comment && data.size() >= kEocdSize; ++comment) {
    const size_t pos = data.size() - kEocdSize - comment;
    if (std::memcmp(data.data() + pos, kEocdSignature, 4) != 0) continue;
    const size_t len = static_cast<unsigned char>(data[pos + 20]) | (static_cast<unsigned char>(data[pos + 21]) << 8);
    if (len != comment) continue;
    const std::string text(data.data() + pos + kEocdSize, comment);
    if (text.rfind(kSealPrefix, 0) != 0) {
      if (required) throw CheckpointError(file + " carries no ddp-worker checksum (not written by save_checkpoint, or damaged)");
      return;
    }
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", crc_of(data.data(), pos + 20));
    if (text.substr(kSealPrefix.size()) != hex)
      throw CheckpointError(file + " is corrupt: checksum mismatch (" + std::to_string(data.size()) +
                            " bytes; the file was changed after it was written)");
    return;
  }
  throw CheckpointError(file + " is truncated or corrupt (" + std::to_string(data.size()) +
                        " bytes, no end-of-archive record: a torch.save file ends with one)");
}

std::vector<char> read_whole(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0)
      throw CheckpointError(std::string(what) + " '" + path + "' does not exist (" + errno_text() + ")");
    throw CheckpointError(std::string(what) + " '" + path + "' cannot be opened (check permissions)");
  }
  std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw CheckpointError(std::string("reading ") + what + " '" + path + "' failed: " + errno_text());
  if (data.empty()) throw CheckpointError(std::string(what) + " '" + path + "' is empty (truncated by a crash?)");
  return data;
}

// The bytes for LibTorch's zip reader, bounded. torch::jit::pickle_load's
// own reader (LibTorch 1.13's VectorReader) copies whatever range the zip
// reader asks for, so a damaged end-of-archive record pointing past the end
// made it read outside the buffer (SIGSEGV; found by
// tests/fuzz/fuzz_checkpoint). A short read fails the zip reader instead.
class BoundedReader final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BoundedReader(const std::vector<char>& data) : data_(data) {}
  size_t size() const override { return data_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= data_.size()) return 0;
    n = std::min<size_t>(n, data_.size() - pos);
    std::memcpy(buf, data_.data() + pos, n);
    return n;
  }

 private:
  const std::vector<char>& data_;
};

c10::IValue unpickle(const std::string& path, const std::vector<char>& data, const char* what) {
  try {
    // What pickle_load does, over the bounded reader.
    caffe2::serialize::PyTorchStreamReader reader(std::make_shared<BoundedReader>(data));
    return torch::jit::readArchiveAndTensors("data", /*pickle_prefix=*/"", /*tensor_prefix=*/"",
                                             /*type_resolver=*/{}, /*obj_loader=*/{}, /*device=*/{}, reader);
  } catch (const c10::Error& e) {
    throw CheckpointError(std::string(what) + " '" + path + "' is truncated or corrupt (" + std::to_string(data.size()) +
                          " bytes, not a readable torch.save archive): " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw CheckpointError(std::string(what) + " '" + path + "' is truncated or corrupt (" + std::to_string(data.size()) +
                          " bytes, not a readable torch.save archive): " + e.what());
  }
}

at::Tensor to_device(const at::Tensor& t, c10::Device device) {
  return t.device() == device ? t : t.to(device);
}

at::Tensor cpu_snapshot(const at::Tensor& t) {
  return t.device().is_cpu() ? t.detach().clone() : t.detach().to(at::kCPU);
}

torch::OrderedDict<std::string, at::Tensor> module_tensors(const torch::nn::Module& module) {
  torch::OrderedDict<std::string, at::Tensor> out;
  for (const auto& p : module.named_parameters(true)) out.insert(p.key(), p.value());
  for (const auto& b : module.named_buffers(true)) out.insert(b.key(), b.value());
  return out;
}

c10::Dict<std::string, at::Tensor> tensor_dict(const torch::OrderedDict<std::string, at::Tensor>& tensors) {
  c10::Dict<std::string, at::Tensor> d;
  for (const auto& item : tensors) d.insert(item.key(), cpu_snapshot(item.value()));
  return d;
}

[[noreturn]] void bad_field(const std::string& path, const std::string& field, const std::string& problem) {
  throw CheckpointError("checkpoint '" + path + "' is not valid: field '" + field + "' " + problem);
}

}  // namespace

Checkpoint make_checkpoint(const torch::nn::Module& module, torch::optim::Optimizer* optimizer, int64_t epoch,
                           int64_t step) {
  Checkpoint c;
  for (const auto& item : module_tensors(module)) c.model.insert(item.key(), cpu_snapshot(item.value()));
  if (optimizer) {
    torch::serialize::OutputArchive archive;
    optimizer->save(archive);
    // Straight into the string (an ostringstream holds it twice: its
    // buffer and the copy str() returns).
    archive.save_to([&](const void* p, size_t n) {
      c.optimizer.append(static_cast<const char*>(p), n);
      return n;
    });
  }
  c.epoch = epoch;
  c.step = step;
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  c.rng_state = gen.get_state();
  return c;
}

void apply_checkpoint(const Checkpoint& ckpt, torch::nn::Module& module, torch::optim::Optimizer* optimizer,
                      bool restore_rng) {
  auto tensors = module_tensors(module);
  std::ostringstream problems;
  for (const auto& item : tensors) {
    const at::Tensor* saved = ckpt.model.find(item.key());
    if (!saved) problems << " missing '" << item.key() << "';";
    else if (saved->sizes() != item.value().sizes())
      problems << " '" << item.key() << "' has shape " << saved->sizes() << " in the checkpoint, "
               << item.value().sizes() << " in the model;";
  }
  for (const auto& item : ckpt.model)
    if (!tensors.find(item.key())) problems << " unexpected '" << item.key() << "';";
  if (!problems.str().empty())
    throw CheckpointError("checkpoint does not match the model:" + problems.str() +
                          " build the same model that wrote it");
  {
    torch::NoGradGuard no_grad;
    for (auto& item : tensors) item.value().copy_(ckpt.model[item.key()]);
  }
  if (optimizer && !ckpt.optimizer.empty()) {
    torch::serialize::InputArchive archive;
    c10::optional<c10::Device> device;
    if (!tensors.is_empty()) device = tensors.begin()->value().device();
    archive.load_from(ckpt.optimizer.data(), ckpt.optimizer.size(), device);
    optimizer->load(archive);
  }
  if (restore_rng && ckpt.rng_state.defined()) {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(ckpt.rng_state);
  }
}

namespace {

// The sealed torch.save archive of a checkpoint: a file's bytes.
std::vector<char> sealed_archive(const Checkpoint& ckpt) {
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert("format", std::string(kFormat));
  d.insert("model", tensor_dict(ckpt.model));
  // The bytes as a tensor without a copy (it lives only while this writes).
  at::Tensor opt = ckpt.optimizer.empty()
                       ? at::empty({0}, at::kByte)
                       : at::from_blob(const_cast<char*>(ckpt.optimizer.data()),
                                       {static_cast<int64_t>(ckpt.optimizer.size())}, at::kByte);
  d.insert("optimizer", opt);
  d.insert("epoch", ckpt.epoch);
  d.insert("step", ckpt.step);
  if (ckpt.rng_state.defined()) d.insert("rng_state", ckpt.rng_state.cpu());
  c10::Dict<std::string, double> metrics;
  for (const auto& [k, v] : ckpt.metrics) metrics.insert(k, v);
  d.insert("metrics", metrics);
  c10::Dict<std::string, std::string> strings;
  for (const auto& [k, v] : ckpt.strings) strings.insert(k, v);
  d.insert("strings", strings);
  // Only when there are some: files without extra tensors stay as they were.
  if (!ckpt.tensors.empty()) {
    c10::Dict<std::string, at::Tensor> tensors;
    for (const auto& [k, v] : ckpt.tensors) tensors.insert(k, cpu_snapshot(v));
    d.insert("tensors", tensors);
  }
  return seal(pickle_archive(d, /*tagged=*/true));
}

// Reads a file's bytes back; `path` names them in errors.
Checkpoint parse_checkpoint(const std::string& path, const std::vector<char>& data, c10::Device device) {
  verify_seal(path, data, "checkpoint", /*required=*/true);
  c10::IValue v = unpickle(path, data, "checkpoint");
  if (!v.isGenericDict()) throw CheckpointError("checkpoint '" + path + "' is not a ddp-worker checkpoint (not a dict)");
  auto d = v.toGenericDict();
  auto get = [&](const char* key) -> c10::IValue {
    auto it = d.find(c10::IValue(std::string(key)));
    if (it == d.end()) bad_field(path, key, "is missing");
    return it->value();
  };
  auto fmt = d.find(c10::IValue(std::string("format")));
  if (fmt == d.end() || !fmt->value().isString() || fmt->value().toStringRef() != kFormat)
    throw CheckpointError("checkpoint '" + path + "' is not a " + kFormat +
                          " file (a weights-only file? read it with load_weights)");
  Checkpoint c;
  auto model = get("model");
  if (!model.isGenericDict()) bad_field(path, "model", "is not a dict");
  for (const auto& item : model.toGenericDict()) {
    if (!item.key().isString() || !item.value().isTensor()) bad_field(path, "model", "holds a non-tensor entry");
    c.model.insert(item.key().toStringRef(), to_device(item.value().toTensor(), device));
  }
  auto opt = get("optimizer");
  if (!opt.isTensor()) bad_field(path, "optimizer", "is not a byte tensor");
  at::Tensor ob = opt.toTensor().contiguous();
  c.optimizer.assign(static_cast<const char*>(ob.data_ptr()), static_cast<size_t>(ob.numel()));
  auto epoch = get("epoch"), step = get("step");
  if (!epoch.isInt()) bad_field(path, "epoch", "is not an integer");
  if (!step.isInt()) bad_field(path, "step", "is not an integer");
  c.epoch = epoch.toInt();
  c.step = step.toInt();
  auto rng = d.find(c10::IValue(std::string("rng_state")));
  if (rng != d.end()) {
    if (!rng->value().isTensor()) bad_field(path, "rng_state", "is not a tensor");
    c.rng_state = rng->value().toTensor();
  }
  auto metrics = get("metrics");
  if (!metrics.isGenericDict()) bad_field(path, "metrics", "is not a dict");
  for (const auto& item : metrics.toGenericDict()) {
    if (!item.key().isString() || !item.value().isDouble()) bad_field(path, "metrics", "holds a non-float entry");
    c.metrics[item.key().toStringRef()] = item.value().toDouble();
  }
  auto strings = get("strings");
  if (!strings.isGenericDict()) bad_field(path, "strings", "is not a dict");
  for (const auto& item : strings.toGenericDict()) {
    if (!item.key().isString() || !item.value().isString()) bad_field(path, "strings", "holds a non-string entry");
    c.strings[item.key().toStringRef()] = item.value().toStringRef();
  }
  auto tensors = d.find(c10::IValue(std::string("tensors")));
  if (tensors != d.end()) {
    if (!tensors->value().isGenericDict()) bad_field(path, "tensors", "is not a dict");
    for (const auto& item : tensors->value().toGenericDict()) {
      if (!item.key().isString() || !item.value().isTensor()) bad_field(path, "tensors", "holds a non-tensor entry");
      c.tensors[item.key().toStringRef()] = item.value().toTensor();
    }
  }
  return c;
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& ckpt) {
  write_atomically(path, sealed_archive(ckpt), "checkpoint");
}

std::string checkpoint_to_bytes(const Checkpoint& ckpt) {
  const std::vector<char> archive = sealed_archive(ckpt);
  return std::string(archive.data(), archive.size());
}

Checkpoint checkpoint_from_bytes(const std::string& bytes, const std::string& what, c10::Device device) {
  if (bytes.empty()) throw CheckpointError("checkpoint '" + what + "' is empty (0 bytes)");
  return parse_checkpoint(what, std::vector<char>(bytes.begin(), bytes.end()), device);
}

void save_checkpoint(ProcessGroup& pg, const std::string& path, const Checkpoint& ckpt) {
  std::string error;
  if (pg.rank() == 0) {
    try {
      save_checkpoint(path, ckpt);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // The status travels with the barrier, so a failed save is an error on
  // every rank instead of a hang on the others.
  at::Tensor failed = at::full({1}, error.empty() ? 0 : 1, at::TensorOptions().dtype(at::kInt).device(pg.device()));
  pg.allreduce(failed, ReduceOp::Sum);
  if (!error.empty()) throw CheckpointError(error);
  if (failed.cpu().item<int>() != 0)
    throw PeerFailure(0, "rank 0 failed to save checkpoint '" + path + "' (see rank 0's error)");
}

Checkpoint load_checkpoint(const std::string& path, c10::Device device) {
  return parse_checkpoint(path, read_whole(path, "checkpoint"), device);
}

void save_weights_for_python(const std::string& path, const torch::nn::Module& module) {
  write_atomically(path, seal(pickle_archive(tensor_dict(module_tensors(module)), /*tagged=*/false)), "weights file");
}

torch::OrderedDict<std::string, at::Tensor> load_weights(const std::string& path, c10::Device device) {
  auto data = read_whole(path, "weights file");
  verify_seal(path, data, "weights file", /*required=*/false);
  c10::IValue v = unpickle(path, data, "weights file");
  if (!v.isGenericDict())
    throw CheckpointError("weights file '" + path + "' does not hold a dict of tensors (from Python save a plain dict: "
                          "torch.save(dict(model.state_dict()), path))");
  torch::OrderedDict<std::string, at::Tensor> out;
  for (const auto& item : v.toGenericDict()) {
    if (!item.key().isString() || !item.value().isTensor())
      throw CheckpointError("weights file '" + path + "' holds an entry that is not name -> tensor");
    out.insert(item.key().toStringRef(), to_device(item.value().toTensor(), device));
  }
  return out;
}

}  // namespace ddp::worker
