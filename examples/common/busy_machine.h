// A hint for the examples: on a machine whose cores are already busy, OpenMP threads spend
// their time waiting for each other at the end of every parallel region (a training step of
// the detector opens a few hundred), so more threads than idle cores can run several times
// slower than one. Measured on 2 cores shared with compilers (load average 6): the detector
// demo trained at 55 images/s on 1 thread and at 8 to 17 images/s on 2. This samples the idle
// time of the cores for a moment (/proc/stat, Linux) and says so before training starts; it
// never changes the thread count itself.
#pragma once

#include <chrono>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>

namespace tg {

// How many cores were idle, on average, over the next `window` (e.g. 1.7 of 2), or a
// negative value where /proc/stat is not readable.
inline double idle_cores(std::chrono::milliseconds window = std::chrono::milliseconds(300)) {
  auto sample = [](double& idle, double& total) {
    std::ifstream in("/proc/stat");
    std::string cpu;
    double v[8] = {};  // user nice system idle iowait irq softirq steal
    if (!(in >> cpu) || cpu != "cpu") return false;
    for (double& x : v)
      if (!(in >> x)) return false;
    idle = v[3] + v[4];
    total = 0;
    for (double x : v) total += x;
    return true;
  };
  double idle0 = 0, total0 = 0, idle1 = 0, total1 = 0;
  if (!sample(idle0, total0)) return -1;
  std::this_thread::sleep_for(window);
  if (!sample(idle1, total1) || total1 <= total0) return -1;
  return std::thread::hardware_concurrency() * (idle1 - idle0) / (total1 - total0);
}

// Prints a hint when `threads` > 1 and fewer than `threads` cores are idle.
inline void warn_if_machine_busy(int threads, std::ostream& out) {
  if (threads <= 1) return;
  const double idle = idle_cores();
  if (idle < 0 || idle >= threads - 0.5) return;
  std::ostringstream line;
  line.setf(std::ios::fixed);
  line.precision(1);
  line << "note: only " << idle << " of " << std::thread::hardware_concurrency() << " cores are idle; with " << threads
       << " threads every parallel region waits for a busy core, and --threads 1 may well be faster\n";
  out << line.str();
}

}  // namespace tg
