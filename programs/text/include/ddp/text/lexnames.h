#pragma once
// The 45 WordNet lexicographer classes (lexnames(5WN)): class index i is the
// lex_filenum i of a synset, and its name (e.g. 5 = "noun.animal") is the
// label written to train.csv / test.csv and line i of labels.txt. A fixed
// table; owns nothing, never reads a file.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::text {

constexpr int kNumClasses = 45;

// All 45 names, index = class.
const std::vector<std::string>& lexnames();
// The name of class `index` (0..44); std::out_of_range otherwise.
const std::string& lexname(int index);
// The class of `name`, or nullopt when it is none of the 45.
std::optional<int> lexname_index(std::string_view name);

}  // namespace ddp::text
