#include "ddp/text/lexnames.h"

#include <stdexcept>
#include <unordered_map>

namespace ddp::text {

const std::vector<std::string>& lexnames() {
  // lexnames(5WN), in file-number order.
  static const std::vector<std::string> names = {
      "adj.all",          "adj.pert",           "adv.all",           "noun.Tops",        "noun.act",
      "noun.animal",      "noun.artifact",      "noun.attribute",    "noun.body",        "noun.cognition",
      "noun.communication", "noun.event",       "noun.feeling",      "noun.food",        "noun.group",
      "noun.location",    "noun.motive",        "noun.object",       "noun.person",      "noun.phenomenon",
      "noun.plant",       "noun.possession",    "noun.process",      "noun.quantity",    "noun.relation",
      "noun.shape",       "noun.state",         "noun.substance",    "noun.time",        "verb.body",
      "verb.change",      "verb.cognition",     "verb.communication", "verb.competition", "verb.consumption",
      "verb.contact",     "verb.creation",      "verb.emotion",      "verb.motion",      "verb.perception",
      "verb.possession",  "verb.social",        "verb.stative",      "verb.weather",     "adj.ppl"};
  return names;
}

const std::string& lexname(int index) {
  if (index < 0 || index >= kNumClasses)
    throw std::out_of_range("lexicographer class " + std::to_string(index) + " is not in 0..44");
  return lexnames()[static_cast<std::size_t>(index)];
}

std::optional<int> lexname_index(std::string_view name) {
  static const std::unordered_map<std::string_view, int> index = [] {
    std::unordered_map<std::string_view, int> m;
    for (int i = 0; i < kNumClasses; ++i) m.emplace(lexnames()[static_cast<std::size_t>(i)], i);
    return m;
  }();
  const auto it = index.find(name);
  if (it == index.end()) return std::nullopt;
  return it->second;
}

}  // namespace ddp::text
