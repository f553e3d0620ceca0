#include "collate.h"

#include "../framework/check.h"

namespace tg::data {

std::vector<Tensor> default_collate(const std::vector<std::vector<Tensor>>& samples) {
  TG_CHECK(!samples.empty(), "default_collate: expected at least one sample, got none");
  const std::vector<Tensor>& first = samples[0];
  for (size_t s = 1; s < samples.size(); ++s)
    TG_CHECK(samples[s].size() == first.size(), "default_collate: sample ", s, " of the batch has ",
             samples[s].size(), " fields but sample 0 has ", first.size());
  std::vector<Tensor> batch;
  batch.reserve(first.size());
  for (size_t k = 0; k < first.size(); ++k) {
    const Tensor& f = first[k];
    TG_CHECK(f.defined(), "default_collate: field ", k, " of sample 0 is undefined");
    Shape shape = f.shape();
    shape.insert(shape.begin(), static_cast<int64_t>(samples.size()));
    Tensor out = Tensor::empty(shape, f.dtype());
    for (size_t s = 0; s < samples.size(); ++s) {
      const Tensor& t = samples[s][k];
      TG_CHECK(t.defined(), "default_collate: field ", k, " of sample ", s, " is undefined");
      TG_CHECK(t.shape() == f.shape() && t.dtype() == f.dtype(), "default_collate: field ", k, " of sample ", s,
               " of the batch is ", dtype_name(t.dtype()), " ", format_shape(t.shape()), " but in sample 0 it is ",
               dtype_name(f.dtype()), " ", format_shape(f.shape()), "; expected the same shape and dtype to stack");
      Tensor row = out.select(0, static_cast<int64_t>(s));
      detail::copy_into_new(row, t, "default_collate");  // the same dtype: an exact copy
    }
    batch.push_back(std::move(out));
  }
  return batch;
}

}  // namespace tg::data
