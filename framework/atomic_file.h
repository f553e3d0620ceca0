// Atomic file writes: the content goes to a temporary file beside the target, is flushed to
// disk, and is renamed over the target. A crash leaves either the old file or the new one.
#pragma once

#include <string>

namespace tg {

// Throws tg::Error naming the path when the folder is not writable or the disk is full.
// A symbolic link is written through (the file it names is replaced, the link stays), and a
// replaced file keeps its permission bits; a new one gets 0666 less the umask. The temporary is
// "<path>.tmp.<pid>.<n>", one per write; stale ones of dead writers are removed first (below).
void write_file_atomically(const std::string& path, const std::string& content);

// A writer killed mid-write (SIGKILL, power loss) leaves its "<path>.tmp.<pid>.<n>" behind. This
// removes those of `path` whose pid names no running process (kill(pid, 0) fails with ESRCH);
// a live writer's temporary, and any other file, is never touched. Best effort: errors are
// ignored. write_file_atomically calls it before each write.
void remove_stale_temporaries(const std::string& path);

}  // namespace tg
