#include "atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "check.h"

namespace tg {

namespace {

// The pid of a temporary "<name>.tmp.<pid>" of target `name`, or -1 when `file` is not one.
long temp_owner(const std::string& file, const std::string& name) {
  const std::string prefix = name + ".tmp.";
  if (file.size() <= prefix.size() || file.compare(0, prefix.size(), prefix) != 0) return -1;
  const std::string digits = file.substr(prefix.size());
  if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stol(digits);
}

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
  remove_stale_temporaries(path);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  TG_CHECK(fd >= 0, "cannot write ", path, ": ", std::strerror(errno));
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
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    TG_ERROR("cannot write ", path, ": rename failed: ", std::strerror(err));
  }
}

}  // namespace tg
