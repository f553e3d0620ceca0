// Training curves: one CSV row per epoch, and a PNG plot of loss and mAP drawn by gnuplot
// (gnuplot-nox), run without a shell, with the script on its stdin and the PNG on its stdout.
// Without gnuplot the plot is skipped with a message, never an error: the CSV holds the same
// numbers.
#pragma once

#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace tg::detr {

struct EpochRecord {
  int epoch = 0;
  double train_loss = 0;
  double map50 = 0, map50_95 = 0;
  double seconds = 0;      // this epoch's training time
  double images_per_second = 0;
};

std::string history_csv(const std::vector<EpochRecord>& history);
// The inverse of history_csv (for --resume: the checkpoint carries the history as this text).
std::vector<EpochRecord> parse_history_csv(const std::string& csv);
void write_history_csv(const std::string& path, const std::vector<EpochRecord>& history);

// A gnuplot (or, when killed, any run) stopped by SIGINT or SIGTERM: the run is being
// interrupted. train_detr ends the way an interrupted process ends: by that signal.
class Interrupted : public Error {
 public:
  Interrupted(int signal_number, const std::string& message) : Error(message), signal_number_(signal_number) {}
  int signal_number() const { return signal_number_; }

 private:
  int signal_number_;
};

// One run of `gnuplot` (looked up in PATH, no shell) with `script` on its stdin and stderr
// discarded: what it wrote on stdout and how it ended.
struct GnuplotRun {
  int spawn_error = 0;  // errno of posix_spawnp (ENOENT: not installed); then nothing else is set
  int signal = 0;       // the signal that killed it, or 0
  int exit_status = -1; // its exit status when it exited
  int wait_error = 0;   // errno of waitpid when it could not tell how gnuplot ended (then no plot)
  std::string output;
};
GnuplotRun run_gnuplot(const std::string& gnuplot, const std::string& script);

// Draws `history` into png_path (written atomically, so a reader never sees half a plot).
// Returns "" on success, else why no PNG was made (gnuplot missing, its exit status); csv_path
// is only named in that message. Throws Interrupted when gnuplot was killed by SIGINT or
// SIGTERM, and never runs it again after a signal. `gnuplot` is the program (tests pass fakes).
std::string plot_history(const std::vector<EpochRecord>& history, const std::string& csv_path,
                         const std::string& png_path, const std::string& gnuplot = "gnuplot");

}  // namespace tg::detr
