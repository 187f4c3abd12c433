#pragma once
// How parse_launch_options (options.cpp) reads each option. Private to config/.

#include "ddp/common/parse.h"
#include "ddp/launcher/config/options.h"

#include <boost/program_options.hpp>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <string>
#include <utility>

namespace ddp::launcher {

// What parse_launch_options reads a value through: the command line first,
// then PET_<NAME>, then the default; each value with where it came from, as
// the user spelled it ("--log-dir", "PET_LOG_DIR"). Records in o.given
// every option given either way.
class OptionReader {
 public:
  // PET_<NAME>: the environment's spelling of an option.
  static std::string pet_name(std::string name) {
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::toupper(c); });
    return "PET_" + name;
  }

  using Value = std::optional<std::pair<std::string, std::string>>;  // (value, where from)

  OptionReader(const boost::program_options::variables_map& vm, const EnvMap& env,
               std::map<std::string, std::string> spelling, LaunchOptions& o)
      : vm_(vm), env_(env), spelling_(std::move(spelling)), o_(o) {}

  Value value(const std::string& name) {
    note_given(name);
    if (vm_.count(name)) return std::make_pair(vm_[name].as<std::string>(), spelling_[name]);
    std::string var = pet_name(name);
    if (auto it = env_.find(var); it != env_.end()) return std::make_pair(it->second, var);
    return std::nullopt;
  }
  bool flag(const std::string& name) {
    note_given(name);
    if (vm_.count(name)) return true;
    std::string var = pet_name(name);
    if (auto it = env_.find(var); it != env_.end()) return usage_checked([&] { return parse_bool(it->second, var); });
    return false;
  }
  // The option as the user named it: "--log-dir", else its underscore spelling.
  std::string source(const std::string& name) { return vm_.count(name) ? spelling_[name] : "--" + name; }
  // Where a value came from, as the user wrote it: "--log-dir /x" or "PET_LOG_DIR=/x".
  std::string given_as(const std::string& name, const std::pair<std::string, std::string>& v) const {
    return vm_.count(name) ? v.second + " " + v.first : v.second + "=" + v.first;
  }
  // How a given option was spelled: "--master-port" or "PET_MASTER_PORT".
  std::string typed(const std::string& name) { return vm_.count(name) ? spelling_[name] : pet_name(name); }
  const EnvMap& env() const { return env_; }

 private:
  void note_given(const std::string& name) {
    if (vm_.count(name) || env_.count(pet_name(name))) o_.given.insert(name);
  }

  const boost::program_options::variables_map& vm_;
  const EnvMap& env_;
  std::map<std::string, std::string> spelling_;
  LaunchOptions& o_;
};

}  // namespace ddp::launcher
