// The teaching view of the tape: the entries behind a tensor as text or as Graphviz DOT.
// (The step-by-step backward trace is set_backward_trace in tape.h.)
#pragma once

#include <string>
#include <vector>

#include "tensor.h"

namespace tg {

// One line per entry, in recording order:
//   #3 linear  in: [8, 4] [16, 4]* [16]*  -> out: [8, 16]  saved: [8, 4] [16, 4]
// A '*' marks an input that is a leaf requiring grad (a parameter or an input of interest).
std::string tape_to_text(const Tensor& root);

// Graphviz DOT: ops as boxes, leaves as ellipses (parameters filled), edges along the data flow.
// `names` optionally labels leaves: pairs of (tensor, name).
std::string tape_to_dot(const Tensor& root, const std::vector<std::pair<Tensor, std::string>>& names = {});

}  // namespace tg
