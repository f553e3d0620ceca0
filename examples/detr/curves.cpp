#include "curves.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include <tapegrad/tapegrad.h>

namespace tg::detr {

std::string history_csv(const std::vector<EpochRecord>& history) {
  std::string out = "epoch,train_loss,map50,map50_95,seconds,images_per_second\n";
  char line[256];
  for (const EpochRecord& r : history) {
    // %.17g: the text round-trips to the same doubles (the checkpoint carries it).
    std::snprintf(line, sizeof line, "%d,%.17g,%.17g,%.17g,%.17g,%.17g\n", r.epoch, r.train_loss, r.map50, r.map50_95,
                  r.seconds, r.images_per_second);
    out += line;
  }
  return out;
}

std::vector<EpochRecord> parse_history_csv(const std::string& csv) {
  std::istringstream in(csv);
  std::string line;
  std::vector<EpochRecord> out;
  TG_CHECK(std::getline(in, line) && line.rfind("epoch,", 0) == 0, "training history: missing the CSV header");
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    EpochRecord r;
    TG_CHECK(std::sscanf(line.c_str(), "%d,%lf,%lf,%lf,%lf,%lf", &r.epoch, &r.train_loss, &r.map50, &r.map50_95,
                         &r.seconds, &r.images_per_second) == 6,
             "training history: cannot read the row '", line, "'");
    out.push_back(r);
  }
  return out;
}

void write_history_csv(const std::string& path, const std::vector<EpochRecord>& history) {
  write_file_atomically(path, history_csv(history));
}

namespace {

// The gnuplot script. The history travels inside it as a datablock and the PNG comes back on
// gnuplot's stdout, so the script names no file: a folder called "Bob's run", or one holding
// gnuplot's or the shell's quote characters, needs no escaping and cannot inject commands.
std::string plot_script(const std::vector<EpochRecord>& history, const char* terminal) {
  return std::string("set terminal ") + terminal + " size 1000,400 noenhanced\n" +
         "$history << EOD\n" + history_csv(history) + "EOD\n" +
         "set datafile separator ','\n"
         "set key autotitle columnhead\n"
         "set multiplot layout 1,2\n"
         "set title 'training loss'\nset xlabel 'epoch'\nset grid\n"
         "plot $history using 1:2 with linespoints lw 2 title 'loss'\n"
         "set title 'validation mAP'\nset yrange [0:1]\n"
         "plot $history using 1:3 with linespoints lw 2 title 'mAP@0.5', "
         "$history using 1:4 with linespoints lw 2 title 'mAP@0.5:0.95'\n"
         "unset multiplot\n";
}

// Closes a file descriptor when it goes out of scope (every return and throw below).
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// The script as an anonymous in-memory file, positioned at its start, to become gnuplot's stdin:
// nothing is written into --out or the temp folder, so nothing is left behind.
int script_file(const std::string& script) {
  const int fd = ::memfd_create("train_detr-plot.gp", MFD_CLOEXEC);
  TG_CHECK(fd >= 0, "plot: cannot create the gnuplot script in memory: ", std::strerror(errno));
  for (size_t done = 0; done < script.size();) {
    const ssize_t n = ::write(fd, script.data() + done, script.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      TG_ERROR("plot: cannot write the gnuplot script: ", std::strerror(err));
    }
    done += size_t(n);
  }
  ::lseek(fd, 0, SEEK_SET);
  return fd;
}

}  // namespace

// Waits for a spawned child when it goes out of scope unless wait() did: an exception between
// spawning and waiting (a failed append) would leave a zombie. Declared before the pipes so it
// waits after they are closed (gnuplot then sees its reader gone and ends).
struct Child {
  pid_t pid = -1;
  ~Child() {
    if (pid > 0)
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
  }
  // The child's wait status; false (errno kept) when waitpid fails: with SIGCHLD ignored the
  // kernel reaps the child itself and its status is lost.
  bool wait(int& status) {
    pid_t done;
    while ((done = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    pid = -1;
    return done > 0;
  }
};

GnuplotRun run_gnuplot(const std::string& gnuplot, const std::string& script) {
  Child child;
  Fd in{script_file(script)}, out_read, out_write;
  int pipe_fds[2];
  TG_CHECK(::pipe2(pipe_fds, O_CLOEXEC) == 0, "plot: cannot create a pipe: ", std::strerror(errno));
  out_read.fd = pipe_fds[0];
  out_write.fd = pipe_fds[1];

  // No shell: argv is {gnuplot} and the script comes on stdin. dup2 clears close-on-exec on the
  // child's 0 and 1; every other descriptor of ours is close-on-exec. The child gets the default
  // action for the signals that end a run, whatever this process does with them (mpirun, or a
  // caller, may ignore SIGPIPE).
  // The signal mask is emptied too: a caller that blocks SIGINT would pass that on.
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  int spawn_error = posix_spawn_file_actions_init(&actions);
  if (spawn_error == 0 && (spawn_error = posix_spawnattr_init(&attr)) != 0) posix_spawn_file_actions_destroy(&actions);
  GnuplotRun run;
  if (spawn_error != 0) {
    run.spawn_error = spawn_error;
    return run;
  }
  sigset_t defaults, empty;
  sigemptyset(&defaults);
  sigemptyset(&empty);
  for (int s : {SIGINT, SIGTERM, SIGPIPE, SIGQUIT, SIGHUP}) sigaddset(&defaults, s);
  for (int e : {posix_spawn_file_actions_adddup2(&actions, in.fd, 0),
                posix_spawn_file_actions_adddup2(&actions, out_write.fd, 1),
                posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0),
                posix_spawnattr_setsigdefault(&attr, &defaults), posix_spawnattr_setsigmask(&attr, &empty),
                posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK)})
    if (spawn_error == 0) spawn_error = e;
  std::vector<char*> argv = {const_cast<char*>(gnuplot.c_str()), nullptr};
  pid_t pid = -1;
  if (spawn_error == 0) spawn_error = ::posix_spawnp(&pid, gnuplot.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (spawn_error != 0) {
    run.spawn_error = spawn_error;
    return run;
  }
  child.pid = pid;
  out_write.close();  // so that reading ends when gnuplot exits

  // SIGINT is not ignored here (std::system did): Ctrl-C ends this process as it would without
  // gnuplot running. Only a handler could interrupt these calls (EINTR): then go on.
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(out_read.fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    run.output.append(buffer, size_t(n));
  }
  int status = 0;
  if (!child.wait(status)) {
    run.wait_error = errno;
    return run;
  }
  if (WIFSIGNALED(status)) run.signal = WTERMSIG(status);
  if (WIFEXITED(status)) run.exit_status = WEXITSTATUS(status);
  return run;
}

namespace {

std::string plot_or_explain(const std::vector<EpochRecord>& history, const std::string& csv_path,
                            const std::string& png_path, const std::string& gnuplot) {
  // Earlier versions left their script beside the plot; it is no file of the run.
  std::error_code ec;
  std::filesystem::remove(png_path + ".gp", ec);
  // pngcairo is missing from some builds; the plain png terminal is always there.
  int exit_status = 0;
  for (const char* terminal : {"pngcairo", "png"}) {
    const GnuplotRun run = run_gnuplot(gnuplot, plot_script(history, terminal));
    if (run.spawn_error == ENOENT)
      return gnuplot + " not found (apt-get install gnuplot-nox): skipped " + png_path + "; the numbers are in " +
             csv_path;
    if (run.spawn_error != 0)
      return "cannot run " + gnuplot + " (" + std::strerror(run.spawn_error) + "): no plot; the numbers are in " +
             csv_path;
    if (run.wait_error != 0)
      return "cannot tell how " + gnuplot + " ended (" + std::strerror(run.wait_error) +
             "; is SIGCHLD ignored?): no plot; the numbers are in " + csv_path;
    // A gnuplot killed by SIGINT or SIGTERM is the run being interrupted (Ctrl-C, kill), not a
    // plotting problem: never plot again, let the caller end the run.
    if (run.signal == SIGINT || run.signal == SIGTERM)
      throw Interrupted(run.signal, gnuplot + " was stopped by signal " + std::to_string(run.signal) +
                                        " (" + strsignal(run.signal) + "): the run is interrupted");
    if (run.signal != 0)
      return gnuplot + " died of signal " + std::to_string(run.signal) + " (" + strsignal(run.signal) +
             "): no plot; the numbers are in " + csv_path;
    if (run.exit_status == 0 && !run.output.empty()) {
      write_file_atomically(png_path, run.output);  // a reader never sees half a PNG
      return "";
    }
    exit_status = run.exit_status;
  }
  return gnuplot + " failed (exit status " + std::to_string(exit_status) + "): no plot; the numbers are in " + csv_path;
}

}  // namespace

std::string plot_history(const std::vector<EpochRecord>& history, const std::string& csv_path,
                         const std::string& png_path, const std::string& gnuplot) {
  // A plot that cannot be made (no descriptors left, a full disk for the PNG) is a message, as
  // curves.h promises, not an error that ends the run; an interrupt still ends it.
  try {
    return plot_or_explain(history, csv_path, png_path, gnuplot);
  } catch (const Interrupted&) {
    throw;
  } catch (const Error& e) {
    return std::string(e.what()) + ": no plot; the numbers are in " + csv_path;
  }
}

}  // namespace tg::detr
