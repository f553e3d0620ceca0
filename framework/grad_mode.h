// Grad mode: whether ops record on the tape. Thread-local, like PyTorch's.
#pragma once

namespace tg {

class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// RAII: no recording inside the scope (inference, optimizer updates, backward itself).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// RAII: recording on inside the scope, whatever the enclosing mode.
class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace tg
