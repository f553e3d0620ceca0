// The deformable attention kernels' public API (ms_deform_attn_kernels.h): entry points that
// forward to the copy of the kernels (ms_deform_attn_kernels*.cpp) compiled for the active
// instruction set (ops/internal/isa_dispatch.h).
#include "ms_deform_attn_kernels.h"

#include "../../framework/half.h"
#include "../internal/isa_dispatch.h"

namespace tg::kernels {

TG_ISA_DECLARE(
    template <class T>
    void ms_deform_attn_forward(const T*, const int64_t*, const int64_t*, const T*, const T*, T*,
                                int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
    template <class T>
    void ms_deform_attn_backward(const T*, const int64_t*, const int64_t*, const T*, const T*,
                                 const T*, T*, T*, T*, int64_t, int64_t, int64_t, int64_t,
                                 int64_t, int64_t, int64_t);
    template <class T>
    void ms_deform_attn_double_backward(const T*, const int64_t*, const int64_t*, const T*,
                                        const T*, const T*, const T*, const T*, const T*, T*, T*,
                                        T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                        int64_t, int64_t);)

template <class T>
void ms_deform_attn_forward(const T* value, const int64_t* spatial_shapes,
                            const int64_t* level_start_index, const T* sampling_locations,
                            const T* attention_weights, T* output, int64_t bs, int64_t num_keys,
                            int64_t heads, int64_t channels, int64_t levels, int64_t queries,
                            int64_t points) {
  TG_ISA_DISPATCH(ms_deform_attn_forward<T>)(value, spatial_shapes, level_start_index,
                                             sampling_locations, attention_weights, output, bs,
                                             num_keys, heads, channels, levels, queries, points);
}

template <class T>
void ms_deform_attn_backward(const T* value, const int64_t* spatial_shapes,
                             const int64_t* level_start_index, const T* sampling_locations,
                             const T* attention_weights, const T* grad_output, T* grad_value,
                             T* grad_sampling_locations, T* grad_attention_weights, int64_t bs,
                             int64_t num_keys, int64_t heads, int64_t channels, int64_t levels,
                             int64_t queries, int64_t points) {
  TG_ISA_DISPATCH(ms_deform_attn_backward<T>)(
      value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
      grad_output, grad_value, grad_sampling_locations, grad_attention_weights, bs, num_keys,
      heads, channels, levels, queries, points);
}

template <class T>
void ms_deform_attn_double_backward(const T* value, const int64_t* spatial_shapes,
                                    const int64_t* level_start_index, const T* sampling_locations,
                                    const T* attention_weights, const T* grad_output,
                                    const T* gg_value, const T* gg_sampling_locations,
                                    const T* gg_attention_weights, T* grad_grad_output_rest,
                                    T* grad_value, T* grad_sampling_locations,
                                    T* grad_attention_weights, int64_t bs, int64_t num_keys,
                                    int64_t heads, int64_t channels, int64_t levels,
                                    int64_t queries, int64_t points) {
  TG_ISA_DISPATCH(ms_deform_attn_double_backward<T>)(
      value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
      grad_output, gg_value, gg_sampling_locations, gg_attention_weights, grad_grad_output_rest,
      grad_value, grad_sampling_locations, grad_attention_weights, bs, num_keys, heads, channels,
      levels, queries, points);
}

#define TG_INSTANTIATE(T)                                                                       \
  template void ms_deform_attn_forward<T>(const T*, const int64_t*, const int64_t*, const T*,    \
                                          const T*, T*, int64_t, int64_t, int64_t, int64_t,      \
                                          int64_t, int64_t, int64_t);                            \
  template void ms_deform_attn_backward<T>(const T*, const int64_t*, const int64_t*, const T*,   \
                                           const T*, const T*, T*, T*, T*, int64_t, int64_t,     \
                                           int64_t, int64_t, int64_t, int64_t, int64_t);         \
  template void ms_deform_attn_double_backward<T>(                                              \
      const T*, const int64_t*, const int64_t*, const T*, const T*, const T*, const T*,         \
      const T*, const T*, T*, T*, T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, \
      int64_t);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
#undef TG_INSTANTIATE
// The 16-bit types: the forward and first-order backward read them natively.
#define TG_INSTANTIATE_16(T)                                                                    \
  template void ms_deform_attn_forward<T>(const T*, const int64_t*, const int64_t*, const T*,    \
                                          const T*, T*, int64_t, int64_t, int64_t, int64_t,      \
                                          int64_t, int64_t, int64_t);                            \
  template void ms_deform_attn_backward<T>(const T*, const int64_t*, const int64_t*, const T*,   \
                                           const T*, const T*, T*, T*, T*, int64_t, int64_t,     \
                                           int64_t, int64_t, int64_t, int64_t, int64_t);
TG_INSTANTIATE_16(BFloat16)
TG_INSTANTIATE_16(Float16)
#undef TG_INSTANTIATE_16

}  // namespace tg::kernels
