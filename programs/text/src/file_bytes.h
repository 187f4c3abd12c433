#pragma once
// Private to ddp_text_core: reads a whole file into memory with POSIX calls
// (one fstat, reads of its size), so that every reader tells a missing file
// (nullopt: the caller names what to install or run) from an unreadable one
// (a TextDataError naming the file, strerror and `fix`).

#include <optional>
#include <string>

namespace ddp::text::detail {

std::optional<std::string> read_file_bytes(const std::string& path, const std::string& fix);

}  // namespace ddp::text::detail
