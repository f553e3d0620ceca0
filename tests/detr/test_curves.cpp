// The training curves' plot: gnuplot runs without a shell and its script names no path, so any
// --out folder gets its plot and none can inject commands; the PNG is written atomically and
// nothing else is left in the folder; a gnuplot killed by SIGINT or SIGTERM interrupts the run
// and is never run again. Fake gnuplots (shell scripts) stand in where the real one cannot show
// the behaviour.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "detr/curves.h"
#include "io_test_util.h"
#include "tiny_run.h"

namespace tg::detr {
namespace {
namespace fs = std::filesystem;

using tg::testing::read_bytes;

const std::vector<EpochRecord> kHistory = {{1, 7.5, 0.1, 0.05, 2, 30}, {2, 6.5, 0.2, 0.1, 2, 30}};

// An executable shell script at dir/name.
std::string fake_program(const std::string& dir, const std::string& name, const std::string& body) {
  fs::create_directories(dir);
  const std::string path = (fs::path(dir) / name).string();
  write_file_atomically(path, "#!/bin/sh\n" + body);
  fs::permissions(path, fs::perms::owner_all);
  return path;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

TEST(DetrCurves, PlotsIntoFoldersWithQuotesWithoutRunningTheirText) {
  if (run_gnuplot("gnuplot", "").spawn_error != 0) GTEST_SKIP() << "gnuplot is not installed";
  const std::string root = fresh_dir("plot_quotes");
  const std::string marker = root + "/injected";
  // A shell would run `touch` for the second (std::system did); gnuplot would read a ' as the
  // end of a quoted path in the first.
  for (const std::string& out : {root + "/Bob's run", root + "/a';touch " + marker + ";'"}) {
    fs::create_directories(out);
    const std::string png = out + "/curves.png";
    EXPECT_EQ(plot_history(kHistory, out + "/history.csv", png), "") << out;
    EXPECT_EQ(read_bytes(png).substr(0, 4), "\x89PNG") << out;
    // Only the plot: no script beside it, no temporary.
    EXPECT_EQ(files_in(out), std::vector<std::string>{"curves.png"}) << out;
  }
  EXPECT_FALSE(fs::exists(marker));
  fs::remove_all(root);
}

TEST(DetrCurves, TheScriptComesOnStdinAndNamesNoPath) {
  const std::string root = fresh_dir("plot_stdin");
  const std::string out = root + "/out\"'$(x)";
  fs::create_directories(out);
  const std::string gnuplot = fake_program(root, "gnuplot", "cat > '" + root + "/script'\nprintf 'a png'\n");
  EXPECT_EQ(plot_history(kHistory, out + "/history.csv", out + "/curves.png", gnuplot), "");
  EXPECT_EQ(read_bytes(out + "/curves.png"), "a png");
  const std::string script = read_bytes(root + "/script");
  EXPECT_NE(script.find("2,6.5,"), std::string::npos) << script;  // the history is inside
  EXPECT_EQ(script.find(root), std::string::npos) << script;
  fs::remove_all(root);
}

TEST(DetrCurves, AGnuplotKilledBySigintOrSigtermInterruptsAndRunsOnce) {
  for (int sig : {SIGINT, SIGTERM}) {
    const std::string root = fresh_dir("plot_signal");
    const std::string count = root + "/runs";
    const std::string gnuplot =
        fake_program(root, "gnuplot", "echo run >> '" + count + "'\nkill -" + std::to_string(sig) + " $$\n");
    try {
      plot_history(kHistory, root + "/history.csv", root + "/curves.png", gnuplot);
      ADD_FAILURE() << "expected Interrupted for signal " << sig;
    } catch (const Interrupted& e) {
      EXPECT_EQ(e.signal_number(), sig);
    }
    EXPECT_EQ(read_bytes(count), "run\n") << "signal " << sig;  // no second attempt with 'png'
    EXPECT_FALSE(fs::exists(root + "/curves.png"));
    fs::remove_all(root);
  }
}

TEST(DetrCurves, AFailingGnuplotTriesThePlainPngTerminalThenGivesUp) {
  const std::string root = fresh_dir("plot_fails");
  const std::string count = root + "/runs";
  const std::string gnuplot = fake_program(root, "gnuplot", "echo run >> '" + count + "'\nexit 3\n");
  const std::string msg = plot_history(kHistory, root + "/history.csv", root + "/curves.png", gnuplot);
  EXPECT_NE(msg.find("exit status 3"), std::string::npos) << msg;
  EXPECT_EQ(read_bytes(count), "run\nrun\n");
  EXPECT_FALSE(fs::exists(root + "/curves.png"));
  // A missing gnuplot is a message, not an error.
  const std::string missing = plot_history(kHistory, root + "/history.csv", root + "/curves.png", root + "/none");
  EXPECT_NE(missing.find("not found"), std::string::npos) << missing;
  fs::remove_all(root);
}

// With SIGCHLD ignored the kernel reaps gnuplot itself and waitpid cannot say how it ended: a
// failing gnuplot's partial output was written as the plot. And a plot that cannot be written
// is a message, as curves.h promises, not an error that ends the run.
TEST(DetrCurves, AnUnknownEndingOrAnUnwritablePlotIsAMessage) {
  const std::string root = fresh_dir("plot_unknown_end");
  const std::string gnuplot = fake_program(root, "gnuplot", "printf 'half a png'\nexit 1\n");
  void (*previous)(int) = std::signal(SIGCHLD, SIG_IGN);
  const std::string msg = plot_history(kHistory, root + "/history.csv", root + "/curves.png", gnuplot);
  std::signal(SIGCHLD, previous);
  EXPECT_NE(msg.find("cannot tell how"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(root + "/curves.png"));
  const std::string ok = fake_program(root, "ok", "printf 'a png'\n");
  const std::string unwritable = plot_history(kHistory, root + "/history.csv", "/etc/passwd/curves.png", ok);
  EXPECT_NE(unwritable.find("no plot"), std::string::npos) << unwritable;
  fs::remove_all(root);
}

}  // namespace
}  // namespace tg::detr
