// Atomic file writes: the content goes to a temporary file beside the target, is flushed to
// disk, and is renamed over the target. A crash leaves either the old file or the new one.
#pragma once

#include <string>

namespace tg {

// Throws tg::Error naming the path when the folder is not writable or the disk is full.
void write_file_atomically(const std::string& path, const std::string& content);

}  // namespace tg
