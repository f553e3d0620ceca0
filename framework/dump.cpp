#include "dump.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <unordered_set>

#include "tape.h"

namespace tg {

namespace {

// The entries reachable from root, in recording order.
std::vector<const Node*> entries_in_order(const Tensor& root) {
  std::vector<const Node*> order;
  std::unordered_set<const Node*> seen;
  std::vector<const Node*> stack;
  if (root.defined() && root.grad_fn()) {
    stack.push_back(root.grad_fn().get());
    seen.insert(stack.back());
  }
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    order.push_back(n);
    for (const Edge& e : n->edges())
      if (e.fn && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  }
  std::sort(order.begin(), order.end(),
            [](const Node* a, const Node* b) { return a->sequence_nr() < b->sequence_nr(); });
  return order;
}

}  // namespace

std::string describe_tensor(const Shape& shape, DType dtype, DType root_dtype) {
  std::string s = format_shape(shape);
  if (dtype != root_dtype) s += std::string(":") + dtype_name(dtype);
  return s;
}

std::string tape_to_text(const Tensor& root) {
  std::ostringstream os;
  std::vector<const Node*> order = entries_in_order(root);
  std::map<const Node*, size_t> index;
  for (size_t i = 0; i < order.size(); ++i) index[order[i]] = i;
  for (size_t i = 0; i < order.size(); ++i) {
    const Node& n = *order[i];
    os << "#" << i << " " << n.op().name << "  in:";
    for (size_t k = 0; k < n.edges().size(); ++k) {
      const TensorMeta& m = n.input_meta()[k];
      const Edge& e = n.edges()[k];
      if (!m.defined) {  // an absent optional input
        os << " -";
        continue;
      }
      os << " " << describe_tensor(m.shape, m.dtype, root.dtype());
      if (e.leaf) os << "*";
      if (e.fn) {
        os << "(#" << index[e.fn.get()];
        if (e.fn->output_meta().size() > 1) os << "." << e.output_nr;  // which of its outputs
        os << ")";
      }
    }
    os << "  -> out:";
    for (const TensorMeta& m : n.output_meta()) os << " " << describe_tensor(m.shape, m.dtype, root.dtype());
    os << "  saved:";
    if (n.released()) os << " (freed by backward)";
    else if (n.saved().empty()) os << " nothing";
    for (const SavedTensor& s : n.saved()) {
      if (!s.tensor.defined()) {
        os << " -";
        continue;
      }
      os << " " << describe_tensor(s.tensor.shape(), s.tensor.dtype(), root.dtype());
      if (s.tensor.version() != s.version) os << "(modified in place)";
    }
    os << "\n";
  }
  if (!order.empty() && root.grad_fn()->output_meta().size() > 1)
    os << "root: output " << root.output_nr() << " of #" << index[root.grad_fn().get()] << "\n";
  return os.str();
}

namespace {
// The name of an op's input k from its OpDef ("input, weight, bias"; "tensors..." names a list:
// tensors[k]).
std::string input_name(const OpDef& op, size_t k) {
  std::vector<std::string> names;
  std::string word;
  for (const char* c = op.inputs;; ++c) {
    if (*c == ',' || *c == '\0') {
      if (!word.empty()) names.push_back(word);
      word.clear();
      if (*c == '\0') break;
    } else if (*c != ' ' || !word.empty()) {  // (leading spaces dropped, inner ones kept)
      word += *c;
    }
  }
  for (std::string& w : names) w.erase(w.find_last_not_of(' ') + 1);  // trailing ones
  if (!names.empty() && names.back().size() > 3 && names.back().compare(names.back().size() - 3, 3, "...") == 0 &&
      k + 1 >= names.size())
    return names.back().substr(0, names.back().size() - 3) + "[" + std::to_string(k + 1 - names.size()) + "]";
  return k < names.size() ? names[k] : "input " + std::to_string(k);
}

// s inside a DOT string: quotes and backslashes escaped (a backslash starts DOT's own escapes,
// \N, \G, ...), a line break as DOT's \n.
std::string dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}
}  // namespace

std::string tape_to_dot(const Tensor& root, const std::vector<std::pair<Tensor, std::string>>& names) {
  std::ostringstream os;
  std::map<const TensorImpl*, std::string> leaf_names;
  for (const auto& [t, name] : names)
    if (t.defined()) leaf_names[t.impl()] = name;
  std::vector<const Node*> order = entries_in_order(root);
  std::map<const Node*, size_t> index;
  for (size_t i = 0; i < order.size(); ++i) index[order[i]] = i;

  os << "digraph tape {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n"
     << "  edge [fontname=\"Helvetica\", fontsize=9];\n";
  std::map<const TensorImpl*, std::string> leaf_ids;
  for (size_t i = 0; i < order.size(); ++i) {
    const Node& n = *order[i];
    os << "  op" << i << " [shape=box, style=\"rounded,filled\", fillcolor=\"#dde8f7\", label=\"#" << i << " "
       << dot_escape(n.op().name) << "\\n";
    for (size_t k = 0; k < n.output_meta().size(); ++k)
      os << (k ? " " : "") << describe_tensor(n.output_meta()[k].shape, n.output_meta()[k].dtype, root.dtype());
    os << "\"];\n";
    for (size_t k = 0; k < n.edges().size(); ++k) {
      const Edge& e = n.edges()[k];
      const std::string arrow = " -> op" + std::to_string(i) + " [label=\"" + dot_escape(input_name(n.op(), k)) + "\"];\n";
      if (e.fn) {
        os << "  op" << index[e.fn.get()] << arrow;
      } else if (e.leaf) {
        auto it = leaf_ids.find(e.leaf.get());
        if (it == leaf_ids.end()) {
          std::string id = "leaf" + std::to_string(leaf_ids.size());
          it = leaf_ids.emplace(e.leaf.get(), id).first;
          auto named = leaf_names.find(e.leaf.get());
          std::string label = named != leaf_names.end() ? dot_escape(named->second) : std::string("leaf");
          os << "  " << id << " [shape=ellipse, style=filled, fillcolor=\""
             << (named != leaf_names.end() ? "#f7e3c4" : "#eeeeee") << "\", label=\"" << label << "\\n"
             << describe_tensor(e.leaf->shape, e.leaf->dtype, root.dtype()) << "\"];\n";
        }
        os << "  " << it->second << arrow;
      } else if (n.input_meta()[k].defined) {  // an input that does not require grad
        const std::string id = "const" + std::to_string(i) + "_" + std::to_string(k);
        os << "  " << id << " [shape=box, style=dashed, color=\"#888888\", fontcolor=\"#555555\", label=\"constant\\n"
           << describe_tensor(n.input_meta()[k].shape, n.input_meta()[k].dtype, root.dtype()) << "\"];\n  " << id << arrow;
      }
    }
  }
  if (!order.empty()) {
    // a root that is one of several outputs of its entry says which
    const bool several = root.grad_fn()->output_meta().size() > 1;
    os << "  output [shape=doublecircle, label=\"out\\n" << format_shape(root.shape()) << " "
       << dtype_name(root.dtype()) << "\"];\n  op"
       << index[root.grad_fn().get()] << " -> output";
    if (several) os << " [label=\"output " << root.output_nr() << "\"]";
    os << ";\n";
  }
  os << "}\n";
  return os.str();
}

std::string tape_to_dot(const Tensor& root, const StateDict& names) {
  std::vector<std::pair<Tensor, std::string>> by_tensor;
  for (const auto& [name, t] : names) by_tensor.emplace_back(t, name);
  return tape_to_dot(root, by_tensor);
}

}  // namespace tg
