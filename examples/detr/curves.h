// Training curves: one CSV row per epoch, and a PNG plot of loss and mAP drawn by gnuplot
// (gnuplot-nox) from a script file written beside it. Without gnuplot the plot is skipped with
// a message, never an error: the CSV holds the same numbers.
#pragma once

#include <string>
#include <vector>

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

// Writes `<png>.gp` and runs gnuplot on it. Returns "" on success, else why no PNG was made
// (gnuplot missing, or its exit status).
std::string plot_history(const std::string& csv_path, const std::string& png_path);

}  // namespace tg::detr
