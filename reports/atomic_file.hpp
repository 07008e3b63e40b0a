// Atomic file replacement, from io (io/files.hpp), where the dump-file writers
// need it too: readers see either the old file or the complete new one.
#pragma once
#include "io/files.hpp"

namespace conform::report {

using io::write_file_atomic;

}  // namespace conform::report
