#pragma once
// The tokens of a text, the same rule in C++ and in the Python twin
// (`re.findall(r"[a-z0-9]+", text.lower())` on ASCII text): ASCII letters
// are lower-cased, a token is a maximal run of [a-z0-9], every other byte
// separates tokens. Pure functions.

#include <string>
#include <string_view>
#include <vector>

namespace ddp::text {

// Calls f(std::string_view token) for each token of `text`, in order. The
// view points into a buffer that is valid only during the call.
template <class F>
void for_each_token(std::string_view text, F&& f) {
  std::string token;
  for (const char c : text) {
    if (c >= 'a' && c <= 'z') {
      token += c;
    } else if (c >= 'A' && c <= 'Z') {
      token += static_cast<char>(c - 'A' + 'a');
    } else if (c >= '0' && c <= '9') {
      token += c;
    } else if (!token.empty()) {
      f(std::string_view(token));
      token.clear();
    }
  }
  if (!token.empty()) f(std::string_view(token));
}

// All tokens of `text`.
std::vector<std::string> tokenize(std::string_view text);

}  // namespace ddp::text
