# Run at build time (POST_BUILD of a Catch2 test binary, ddp_catch_tests() in
# tests/CMakeLists.txt): gives every case the binary lists its CTest LABELS,
# so scripts/run-tests and the sanitizer scripts select cases by label, never
# by their titles. A case gets the binary's LABELS, plus the label of each
# TAGS entry whose Catch tag it carries:
#   tag          the Catch tag [tag] gives the label "tag"
#   tag=label    the Catch tag [tag] gives "label"
#   #file=label  the cases of file.cpp (Catch's -# file tags) get "label"
# Inputs (-D): EXE, PREFIX (catch_discover_tests' TEST_PREFIX), LABELS and
# TAGS (comma-separated), OUT (the CTest script written, included after
# Catch's own list of the binary's tests).

cmake_policy(SET CMP0007 NEW)  # list(FILTER) and empty elements in script mode
cmake_policy(SET CMP0057 NEW)  # if(IN_LIST)

function(list_names out)  # list_names(<var> [catch test spec...])
  execute_process(COMMAND "${EXE}" ${ARGN} --list-test-names-only
    OUTPUT_VARIABLE text RESULT_VARIABLE rc)
  # Catch returns a count; a signal comes back as its name ("Segmentation
  # fault"), and a binary that crashes while listing must fail the build,
  # not lose its cases (catch_discover_tests then registers none).
  if(NOT rc MATCHES "^[0-9]+$")
    message(FATAL_ERROR "catch_labels: '${EXE} ${ARGN} --list-test-names-only' failed: ${rc}")
  endif()
  # Catch prints nothing but names, one a line. CTest's discovery splits a
  # name at ';' into two cases that both fail: refuse it here, at build time.
  string(REGEX MATCH "[^\n]*;[^\n]*" bad "${text}")
  if(bad)
    message(FATAL_ERROR "catch_labels: the case \"${bad}\" of ${EXE} has a ';' in its name, which CTest splits into two cases: write ',' instead")
  endif()
  string(REPLACE "\n" ";" names "${text}")
  list(FILTER names EXCLUDE REGEX "^$")
  set(${out} "${names}" PARENT_SCOPE)
endfunction()

string(REPLACE "," ";" base_labels "${LABELS}")
string(REPLACE "," ";" tags "${TAGS}")
list_names(all_names)
set(index 0)
foreach(entry IN LISTS tags)
  if(entry MATCHES "^([^=]+)=(.+)$")
    set(tag "${CMAKE_MATCH_1}")
    set(label "${CMAKE_MATCH_2}")
  else()
    set(tag "${entry}")
    set(label "${entry}")
  endif()
  if(tag MATCHES "^#")
    list_names(names "-#" "[${tag}]")
  else()
    list_names(names "[${tag}]")
  endif()
  foreach(name IN LISTS names)
    string(MD5 key "${name}")
    list(APPEND extra_${key} "${label}")
  endforeach()
endforeach()

set(script "")
foreach(name IN LISTS all_names)
  string(MD5 key "${name}")
  set(labels ${base_labels} ${extra_${key}})
  list(REMOVE_DUPLICATES labels)
  # COST orders a parallel run (ctest -j) before CTest has measured the cases
  # (a clean clone): the long kinds first, so the last minutes are not one
  # end-to-end case running beside an idle slot.
  set(cost 0)
  if("e2e" IN_LIST labels OR "reliability" IN_LIST labels OR "multinode" IN_LIST labels)
    set(cost 10)
  elseif("process" IN_LIST labels)
    set(cost 1)
  endif()
  string(APPEND script "set_tests_properties([==[${PREFIX}${name}]==] PROPERTIES LABELS \"${labels}\" COST ${cost})\n")
endforeach()
file(WRITE "${OUT}" "${script}")
