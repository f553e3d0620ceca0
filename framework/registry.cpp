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
  std::ostringstream os;
  os << std::left << std::setw(28) << "forward" << std::setw(38) << "backward" << std::setw(44)
     << "differentiable inputs" << "samples\n";
  for (const OpDef* op : ops()) {
    size_t n = op->samples ? op->samples().size() : 0;
    os << std::setw(28) << op->name << std::setw(38) << op->backward_name << std::setw(44) << op->inputs << n
       << "\n";
  }
  return os.str();
}

}  // namespace tg
