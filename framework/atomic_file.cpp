#include "atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "check.h"

namespace tg {

namespace {

bool all_digits(const std::string& s, size_t max_size) {
  return !s.empty() && s.size() <= max_size && s.find_first_not_of("0123456789") == std::string::npos;
}

// The pid of a temporary "<name>.tmp.<pid>.<n>" (or "<name>.tmp.<pid>", as earlier versions
// named them) of target `name`, or -1 when `file` is not one.
long temp_owner(const std::string& file, const std::string& name) {
  const std::string prefix = name + ".tmp.";
  if (file.size() <= prefix.size() || file.compare(0, prefix.size(), prefix) != 0) return -1;
  const std::string rest = file.substr(prefix.size());
  const size_t dot = rest.find('.');
  const std::string pid = rest.substr(0, dot);
  if (!all_digits(pid, 9) || (dot != std::string::npos && !all_digits(rest.substr(dot + 1), 19))) return -1;
  return std::stol(pid);
}

// The file a write of `path` should replace: path itself, or, when it is a symbolic link, what
// the link names (np.save and torch.save write through a link; replacing it by a regular file
// left the linked file stale).
std::string write_target(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  for (int hops = 0; hops < 40; ++hops) {  // Linux's limit on links followed in one lookup
    std::error_code ec;
    if (!fs::is_symlink(fs::symlink_status(p, ec))) return p.string();
    const fs::path link = fs::read_symlink(p, ec);
    TG_CHECK(!ec, "cannot write ", path, ": cannot read the symbolic link ", p.string(), " (", ec.message(), ")");
    p = link.is_absolute() ? link : p.parent_path() / link;
  }
  TG_ERROR("cannot write ", path, ": too many levels of symbolic links");
}

std::atomic<uint64_t> g_temp_counter{0};

}  // namespace

void remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string name = target.filename().string();
  if (name.empty()) return;
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  // Best effort: a folder we cannot list, or a file that vanishes meanwhile, is not an error
  // (the write that follows reports any real problem).
  for (; !ec && it != end; it.increment(ec)) {
    const std::string file = it->path().filename().string();
    const long pid = temp_owner(file, name);
    if (pid <= 0 || pid == ::getpid()) continue;
    // ESRCH: no such process, so no writer can still be filling this file. EPERM means a live
    // process of another user; a pid reused since the writer died also keeps its file (the
    // safe side). Pids are per pid namespace: writers in other containers sharing this folder
    // would look dead, which is why only this exact target's temporaries are considered.
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::error_code rm_ec;
      fs::remove(it->path(), rm_ec);
    }
  }
}

void write_file_atomically(const std::string& path, const std::string& content) {
  const std::string target = write_target(path);
  remove_stale_temporaries(target);
  // One temporary per write (two threads saving one path each finish a whole file; the last
  // rename wins).
  const std::string tmp =
      target + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(g_temp_counter.fetch_add(1));
  // A replaced file keeps its permission bits (a private checkpoint stays private); a new one
  // gets 0666 less the umask, as open() and np.save give it.
  struct stat old_stat;
  const bool replacing = ::stat(target.c_str(), &old_stat) == 0;
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  TG_CHECK(fd >= 0, "cannot write ", path, ": ", std::strerror(errno));
  if (replacing && ::fchmod(fd, old_stat.st_mode & 07777) != 0) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    TG_ERROR("cannot write ", path, ": cannot keep its permissions: ", std::strerror(err));
  }
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      TG_ERROR("cannot write ", path, ": ", std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    TG_ERROR("cannot write ", path, ": ", std::strerror(err));
  }
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    TG_ERROR("cannot write ", path, ": rename failed: ", std::strerror(err));
  }
}

}  // namespace tg
