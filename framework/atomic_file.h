// Atomic file writes: the content goes to a temporary file beside the target, is flushed to
// disk, and is renamed over the target. A crash leaves either the old file or the new one.
#pragma once

#include <string>

namespace tg {

// Throws tg::Error naming the path when the folder is not writable or the disk is full.
// The temporary is "<path>.tmp.<pid>"; stale ones of dead writers are removed first (below).
void write_file_atomically(const std::string& path, const std::string& content);

// A writer killed mid-write (SIGKILL, power loss) leaves its "<path>.tmp.<pid>" behind. This
// removes those of `path` whose pid names no running process (kill(pid, 0) fails with ESRCH);
// a live writer's temporary, and any other file, is never touched. Best effort: errors are
// ignored. write_file_atomically calls it before each write.
void remove_stale_temporaries(const std::string& path);

}  // namespace tg
