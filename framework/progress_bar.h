// A one-line terminal progress bar for training loops: a bar, done/total, named metrics (loss,
// accuracy, ...), samples/s and an ETA, redrawn in place with '\r' at most every
// `redraw_seconds` (to std::cerr by default, so a program's stdout stays its results).
//
//   ProgressBar bar(steps_per_epoch, "epoch 1/5");
//   for (...) { ...; bar.update(step + 1, batch_size, {{"loss", loss}}); }
//   bar.finish();
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace tg {

// "mm:ss", or "h:mm:ss" past an hour; "--:--" when unknown.
inline std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 360000) return "--:--";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%02lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return buf;
}

using Metrics = std::vector<std::pair<std::string, double>>;

// The line itself, a pure function of its inputs (what the tests check).
inline std::string render_progress(int64_t done, int64_t total, int64_t samples, double elapsed_seconds,
                                   const Metrics& metrics, const std::string& label = "", int width = 24) {
  const double frac = total > 0 ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total)) : 0.0;
  const int filled = static_cast<int>(frac * width);
  std::string line = label.empty() ? "" : label + " ";
  line += "[" + std::string(filled, '=') + (filled < width ? ">" + std::string(width - filled - 1, ' ') : "") + "] ";
  char buf[128];
  std::snprintf(buf, sizeof buf, "%lld/%lld %3d%%", static_cast<long long>(done), static_cast<long long>(total),
                static_cast<int>(frac * 100));
  line += buf;
  for (const auto& [name, value] : metrics) {
    std::snprintf(buf, sizeof buf, " %s %.4g", name.c_str(), value);
    line += buf;
  }
  const double rate = elapsed_seconds > 0 ? static_cast<double>(samples) / elapsed_seconds : 0.0;
  std::snprintf(buf, sizeof buf, " | %.0f samples/s", rate);
  line += buf;
  const double eta = done > 0 && done < total ? elapsed_seconds * static_cast<double>(total - done) / done
                                              : (done >= total ? 0.0 : -1.0);
  line += (done >= total ? " | took " + format_duration(elapsed_seconds) : " | ETA " + format_duration(eta));
  return line;
}

class ProgressBar {
 public:
  explicit ProgressBar(int64_t total, std::string label = "", std::ostream& out = std::cerr, double redraw_seconds = 0.2)
      : total_(total), label_(std::move(label)), out_(out), redraw_seconds_(redraw_seconds), start_(Clock::now()) {}
  // A bar left by an exception (a diverged loss, a bad batch) ends its line, so that the
  // program's error message starts a line of its own.
  ~ProgressBar() {
    if (!finished_ && last_len_ > 0) out_ << "\n" << std::flush;
  }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // `done` steps finished so far; `samples` processed in this update (for samples/s).
  void update(int64_t done, int64_t samples, const Metrics& metrics = {}) {
    done_ = done;
    samples_ += samples;
    metrics_ = metrics;
    const double now = seconds();
    drawn_ = false;
    if (done < total_ && now - last_draw_ < redraw_seconds_) return;
    last_draw_ = now;
    draw(now);
  }

  // Draws the final state, unless the last update drew it already (in a log, where '\r' does
  // not overwrite, it would appear twice), ends the line and stops the clock.
  void finish() {
    if (finished_) return;
    finished_ = true;
    finish_seconds_ = seconds();
    if (!drawn_) draw(finish_seconds_);
    out_ << "\n" << std::flush;
  }

  // Seconds since construction, up to finish(): a program that evaluates after finishing an
  // epoch reports the epoch's time, not the evaluation's too.
  double elapsed_seconds() const { return finished_ ? finish_seconds_ : seconds(); }
  int64_t samples() const { return samples_; }

 private:
  using Clock = std::chrono::steady_clock;
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  void draw(double now) {
    std::string line = render_progress(done_, total_, samples_, now, metrics_, label_);
    // Pad over a longer previous line so no stale characters remain after '\r'.
    const size_t pad = last_len_ > line.size() ? last_len_ - line.size() : 0;
    last_len_ = line.size();
    out_ << '\r' << line << std::string(pad, ' ') << std::flush;
    drawn_ = true;
  }

  int64_t total_;
  std::string label_;
  std::ostream& out_;
  double redraw_seconds_;
  Clock::time_point start_;
  double last_draw_ = -1e9;
  int64_t done_ = 0, samples_ = 0;
  Metrics metrics_;
  size_t last_len_ = 0;
  bool finished_ = false;
  bool drawn_ = false;  // the line on screen shows the latest update
  double finish_seconds_ = 0;
};

}  // namespace tg
