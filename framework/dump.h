// The teaching view of the tape: the entries behind a tensor as text or as Graphviz DOT.
// (The step-by-step backward trace is set_backward_trace in tape.h.)
#pragma once

#include <string>
#include <vector>

#include "state_dict.h"
#include "tensor.h"

namespace tg {

// One line per entry, in recording order:
//   #3 linear  in: [8, 4] [16, 4]* [16]*  -> out: [8, 16]  saved: [8, 4] [16, 4]
// A '*' marks an input that is a leaf requiring grad (a parameter or an input of interest),
// (#k) the entry an input comes from ((#k.o): its output o, when it has several; its outputs on
// the tape, which for a custom op are the floating ones), '-' an absent optional input. Tensors have the root's dtype
// unless theirs follows the shape ("[8, 4]:bfloat16" in a float32 graph, as autocast's casts
// make them). A saved
// tensor changed in place since it was saved is marked "(modified in place)": backward through
// that entry will refuse it. A root that is one of several outputs of its entry (a split, a
// max with indices) ends the dump with "root: output 1 of #3".
std::string tape_to_text(const Tensor& root);

// Graphviz DOT: ops as boxes, leaves as ellipses (named ones filled), inputs that do not require
// grad as dashed "constant" boxes, edges along the data flow, each labelled with the argument it
// feeds (the op's input names in the registry: "self", "other", "weight", ...). "out" names the
// root's dtype, shapes of other dtypes carry theirs, and the edge to "out" names the output a
// multi-output entry gave the root.
// `names` optionally labels leaves: pairs of (tensor, name), or a StateDict of (name, tensor) as
// Module::named_parameters() gives: tape_to_dot(loss, model.named_parameters()).
std::string tape_to_dot(const Tensor& root, const std::vector<std::pair<Tensor, std::string>>& names = {});
std::string tape_to_dot(const Tensor& root, const StateDict& names);

// A tensor as the dumps and the backward trace (set_backward_trace) print it: its shape, and
// its dtype when not the root's ("[2, 3]", or "[2, 3]:float64" in a float32 graph).
std::string describe_tensor(const Shape& shape, DType dtype, DType root_dtype);

}  // namespace tg
