#include "curves.h"

#include <cstdio>
#include <cstdlib>
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

std::string plot_history(const std::string& csv_path, const std::string& png_path) {
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0)
    return "gnuplot not found (apt-get install gnuplot-nox): skipped " + png_path + "; the numbers are in " + csv_path;
  const std::string script_path = png_path + ".gp";
  std::string script =
      "set terminal pngcairo size 1000,400 noenhanced\n"
      "set output '" + png_path + "'\n"
      "set datafile separator ','\n"
      "set key autotitle columnhead\n"
      "set multiplot layout 1,2\n"
      "set title 'training loss'\nset xlabel 'epoch'\nset grid\n"
      "plot '" + csv_path + "' using 1:2 with linespoints lw 2 title 'loss'\n"
      "set title 'validation mAP'\nset yrange [0:1]\n"
      "plot '" + csv_path + "' using 1:3 with linespoints lw 2 title 'mAP@0.5', "
      "'' using 1:4 with linespoints lw 2 title 'mAP@0.5:0.95'\n"
      "unset multiplot\n";
  write_file_atomically(script_path, script);
  const std::string cmd = "gnuplot '" + script_path + "' > /dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  if (status != 0) {
    // pngcairo is missing from some builds; the plain png terminal is always there.
    std::string fallback = script;
    fallback.replace(fallback.find("pngcairo"), 8, "png");
    write_file_atomically(script_path, fallback);
    if (std::system(cmd.c_str()) != 0) return "gnuplot failed on " + script_path + ": no plot";
  }
  return "";
}

}  // namespace tg::detr
