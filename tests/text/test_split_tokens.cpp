// The split hash against values computed independently, and the token rule.
#include <catch2/catch.hpp>

#include "ddp/text/split.h"
#include "ddp/text/tokenizer.h"

using namespace ddp::text;

TEST_CASE("split: FNV-1a 64 and the test rule match values computed with Python", "[text][split]") {
  // Computed with Python 3, independently of this code:
  //   def fnv(s):
  //       h = 14695981039346656037
  //       for b in s.encode(): h = ((h ^ b) * 1099511628211) % 2**64
  //       return h
  CHECK(fnv1a_64("") == 14695981039346656037ULL);
  CHECK(fnv1a_64("a") == 12638187200555641996ULL);  // 0xaf63dc4c8601ec8c, FNV's own test vector
  CHECK(fnv1a_64("n:00001740") == 6735889452028699721ULL);
  CHECK(fnv1a_64("v:00001740") == 6245038305152114625ULL);
  CHECK(fnv1a_64("a:00001740") == 12203486865160753838ULL);
  CHECK(fnv1a_64("r:00001740") == 8103179944266048901ULL);
  CHECK(split_key('n', "00001740") == "n:00001740");
  CHECK_FALSE(is_test("n:00001740"));  // ...721 % 10 = 1
  // The first three test-split keys from n:00001740 up (fnv(k) % 10 == 0).
  CHECK(is_test("n:00001741"));
  CHECK(is_test("n:00001756"));
  CHECK(is_test("n:00001767"));
  int in_test = 0;
  for (int o = 1742; o < 1756; ++o) in_test += is_test("n:0000" + std::to_string(o));
  CHECK(in_test == 0);
}

TEST_CASE("tokens: lower-cased runs of [a-z0-9], everything else separates", "[text][tokens]") {
  using V = std::vector<std::string>;
  CHECK(tokenize("Don't stop-Believing, 42 times!") == V{"don", "t", "stop", "believing", "42", "times"});
  CHECK(tokenize("(usually followed by `to') A4_size") == V{"usually", "followed", "by", "to", "a4", "size"});
  CHECK(tokenize("") == V{});
  CHECK(tokenize(" ;,.-") == V{});
  CHECK(tokenize("caf\xc3\xa9 na\xefve") == V{"caf", "na", "ve"});  // non-ASCII bytes separate
  CHECK(tokenize("ABC\tdef\nGhI0") == V{"abc", "def", "ghi0"});
}
