#!/bin/sh
# A quiet build (issue 50): Boost.PropertyTree's JSON parser is included only
# through ddp/common/ptree_json.h, and that header compiles without a word
# (Boost 1.74's json_parser printed bind.hpp's deprecation note in every file).
# usage: quiet_boost_json.sh <c++ compiler> <source root>
set -u
cxx=$1 root=$2
status=0
direct=$(grep -rln --include='*.cpp' --include='*.h' --include='*.hpp' \
  'include <boost/property_tree/json_parser.hpp>' \
  "$root/common" "$root/launcher" "$root/worker" "$root/programs" "$root/tests" "$root/bench" "$root/examples" \
  | grep -v '/common/include/ddp/common/ptree_json.h$')
if [ -n "$direct" ]; then
  echo "these include Boost's json_parser.hpp directly; include \"ddp/common/ptree_json.h\" instead:"
  echo "$direct"
  status=1
fi
out=$(echo '#include "ddp/common/ptree_json.h"' |
      "$cxx" -std=c++17 -Wall -Wextra -fsyntax-only -I "$root/common/include" -x c++ - 2>&1)
if [ -n "$out" ]; then
  echo "ddp/common/ptree_json.h does not compile quietly:"
  echo "$out"
  status=1
fi
[ $status = 0 ] && echo "ptree_json.h is the one way in, and it compiles quietly"
exit $status
