#include "registry.h"

#include <algorithm>
#include <cstring>
#include <iomanip>
#include <sstream>

namespace tg {

void Registry::add(const OpDef& op) {
  for (const OpDef* existing : ops_) {
    if (existing == &op) return;
    TG_CHECK(std::strcmp(existing->name, op.name) != 0, "Registry::add: an op named '", op.name,
             "' is already registered");
  }
  ops_.push_back(&op);
}

const OpDef* Registry::find(const std::string& name) const {
  for (const OpDef* op : ops_)
    if (name == op->name) return op;
  return nullptr;
}

std::vector<const OpDef*> Registry::ops() const {
  std::vector<const OpDef*> sorted = ops_;
  std::sort(sorted.begin(), sorted.end(),
            [](const OpDef* a, const OpDef* b) { return std::strcmp(a->name, b->name) < 0; });
  return sorted;
}

std::string Registry::table() const {
  // Columns as wide as their longest entry, so long names never run into the next column.
  size_t wn = 7, wb = 8, wi = 21;
  for (const OpDef* op : ops()) {
    wn = std::max(wn, std::strlen(op->name));
    wb = std::max(wb, std::strlen(op->backward_name));
    wi = std::max(wi, std::strlen(op->inputs));
  }
  std::ostringstream os;
  os << std::left << std::setw(wn + 2) << "forward" << std::setw(wb + 2) << "backward" << std::setw(wi + 2)
     << "differentiable inputs" << std::setw(9) << "samples" << "twice\n";
  for (const OpDef* op : ops()) {
    size_t n = op->samples ? op->samples().size() : 0;
    os << std::setw(wn + 2) << op->name << std::setw(wb + 2) << op->backward_name << std::setw(wi + 2) << op->inputs
       << std::setw(9) << n << (op->twice_differentiable ? "yes" : "-") << "\n";
  }
  return os.str();
}

}  // namespace tg
