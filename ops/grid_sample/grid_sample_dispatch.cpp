// The grid_sample and affine_grid kernels' public API (grid_sample_kernels.h): entry points that
// forward to the copy of the kernels (grid_sample_kernels*.cpp) compiled for the active
// instruction set (ops/internal/isa_dispatch.h).
#include "grid_sample_kernels.h"

#include "../../framework/half.h"
#include "../internal/isa_dispatch.h"

namespace tg::kernels {

TG_ISA_DECLARE(
    template <class T>
    void grid_sample_2d_forward(const T*, const T*, T*, int64_t, int64_t, int64_t, int64_t,
                                int64_t, int64_t, GridSampleMode, GridSamplePadding, bool);
    template <class T>
    void grid_sample_2d_backward(const T*, const T*, const T*, T*, T*, int64_t, int64_t, int64_t,
                                 int64_t, int64_t, int64_t, GridSampleMode, GridSamplePadding,
                                 bool);
    template <class T>
    void grid_sample_2d_double_backward(const T*, const T*, const T*, const T*, T*, T*, T*,
                                        int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                        GridSampleMode, GridSamplePadding, bool);
    template <class T>
    void affine_grid_2d_forward(const T*, T*, int64_t, int64_t, int64_t, bool);
    template <class T>
    void affine_grid_2d_backward(const T*, T*, int64_t, int64_t, int64_t, bool);
    template <class T>
    void grid_sample_3d_forward(const T*, const T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                int64_t, int64_t, int64_t, GridSampleMode, GridSamplePadding, bool);
    template <class T>
    void grid_sample_3d_backward(const T*, const T*, const T*, T*, T*, int64_t, int64_t, int64_t,
                                 int64_t, int64_t, int64_t, int64_t, int64_t, GridSampleMode,
                                 GridSamplePadding, bool);
    template <class T>
    void grid_sample_3d_double_backward(const T*, const T*, const T*, const T*, T*, T*, T*, int64_t,
                                        int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                                        int64_t, GridSampleMode, GridSamplePadding, bool);
    template <class T>
    void affine_grid_3d_forward(const T*, T*, int64_t, int64_t, int64_t, int64_t, bool);
    template <class T>
    void affine_grid_3d_backward(const T*, T*, int64_t, int64_t, int64_t, int64_t, bool);)

template <class T>
void grid_sample_2d_forward(const T* input, const T* grid, T* output, int64_t N, int64_t C,
                            int64_t H, int64_t W, int64_t Ho, int64_t Wo, GridSampleMode mode,
                            GridSamplePadding padding, bool align_corners) {
  TG_ISA_DISPATCH(grid_sample_2d_forward<T>)(input, grid, output, N, C, H, W, Ho, Wo, mode,
                                             padding, align_corners);
}

template <class T>
void grid_sample_2d_backward(const T* grad_output, const T* input, const T* grid, T* grad_input,
                             T* grad_grid, int64_t N, int64_t C, int64_t H, int64_t W, int64_t Ho,
                             int64_t Wo, GridSampleMode mode, GridSamplePadding padding,
                             bool align_corners) {
  TG_ISA_DISPATCH(grid_sample_2d_backward<T>)(grad_output, input, grid, grad_input, grad_grid, N,
                                              C, H, W, Ho, Wo, mode, padding, align_corners);
}

template <class T>
void grid_sample_2d_double_backward(const T* grad_output, const T* input, const T* grid,
                                    const T* gg_grid, T* grad_grad_output, T* grad_input,
                                    T* grad_grid, int64_t N, int64_t C, int64_t H, int64_t W,
                                    int64_t Ho, int64_t Wo, GridSampleMode mode,
                                    GridSamplePadding padding, bool align_corners) {
  TG_ISA_DISPATCH(grid_sample_2d_double_backward<T>)(grad_output, input, grid, gg_grid,
                                                     grad_grad_output, grad_input, grad_grid, N,
                                                     C, H, W, Ho, Wo, mode, padding,
                                                     align_corners);
}

template <class T>
void affine_grid_2d_forward(const T* theta, T* grid, int64_t N, int64_t H, int64_t W,
                            bool align_corners) {
  TG_ISA_DISPATCH(affine_grid_2d_forward<T>)(theta, grid, N, H, W, align_corners);
}

template <class T>
void affine_grid_2d_backward(const T* grad_grid, T* grad_theta, int64_t N, int64_t H, int64_t W,
                             bool align_corners) {
  TG_ISA_DISPATCH(affine_grid_2d_backward<T>)(grad_grid, grad_theta, N, H, W, align_corners);
}

template <class T>
void grid_sample_3d_forward(const T* input, const T* grid, T* output, int64_t N, int64_t C, int64_t D,
                            int64_t H, int64_t W, int64_t Do, int64_t Ho, int64_t Wo, GridSampleMode mode,
                            GridSamplePadding padding, bool align_corners) {
  TG_ISA_DISPATCH(grid_sample_3d_forward<T>)(input, grid, output, N, C, D, H, W, Do, Ho, Wo, mode, padding,
                                             align_corners);
}

template <class T>
void grid_sample_3d_backward(const T* grad_output, const T* input, const T* grid, T* grad_input, T* grad_grid,
                             int64_t N, int64_t C, int64_t D, int64_t H, int64_t W, int64_t Do, int64_t Ho,
                             int64_t Wo, GridSampleMode mode, GridSamplePadding padding, bool align_corners) {
  TG_ISA_DISPATCH(grid_sample_3d_backward<T>)(grad_output, input, grid, grad_input, grad_grid, N, C, D, H, W,
                                              Do, Ho, Wo, mode, padding, align_corners);
}

template <class T>
void grid_sample_3d_double_backward(const T* grad_output, const T* input, const T* grid, const T* gg_grid,
                                    T* grad_grad_output, T* grad_input, T* grad_grid, int64_t N, int64_t C,
                                    int64_t D, int64_t H, int64_t W, int64_t Do, int64_t Ho, int64_t Wo,
                                    GridSampleMode mode, GridSamplePadding padding, bool align_corners) {
  TG_ISA_DISPATCH(grid_sample_3d_double_backward<T>)(grad_output, input, grid, gg_grid, grad_grad_output,
                                                     grad_input, grad_grid, N, C, D, H, W, Do, Ho, Wo, mode,
                                                     padding, align_corners);
}

template <class T>
void affine_grid_3d_forward(const T* theta, T* grid, int64_t N, int64_t D, int64_t H, int64_t W,
                            bool align_corners) {
  TG_ISA_DISPATCH(affine_grid_3d_forward<T>)(theta, grid, N, D, H, W, align_corners);
}

template <class T>
void affine_grid_3d_backward(const T* grad_grid, T* grad_theta, int64_t N, int64_t D, int64_t H, int64_t W,
                             bool align_corners) {
  TG_ISA_DISPATCH(affine_grid_3d_backward<T>)(grad_grid, grad_theta, N, D, H, W, align_corners);
}

#define TG_INSTANTIATE(T)                                                                       \
  template void grid_sample_2d_forward<T>(const T*, const T*, T*, int64_t, int64_t, int64_t,    \
                                          int64_t, int64_t, int64_t, GridSampleMode,            \
                                          GridSamplePadding, bool);                             \
  template void grid_sample_2d_backward<T>(const T*, const T*, const T*, T*, T*, int64_t,       \
                                           int64_t, int64_t, int64_t, int64_t, int64_t,         \
                                           GridSampleMode, GridSamplePadding, bool);            \
  template void grid_sample_2d_double_backward<T>(const T*, const T*, const T*, const T*, T*,   \
                                                  T*, T*, int64_t, int64_t, int64_t, int64_t,   \
                                                  int64_t, int64_t, GridSampleMode,             \
                                                  GridSamplePadding, bool);                     \
  template void affine_grid_2d_forward<T>(const T*, T*, int64_t, int64_t, int64_t, bool);       \
  template void affine_grid_2d_backward<T>(const T*, T*, int64_t, int64_t, int64_t, bool);      \
  template void grid_sample_3d_double_backward<T>(const T*, const T*, const T*, const T*, T*,    \
                                                  T*, T*, int64_t, int64_t, int64_t, int64_t,   \
                                                  int64_t, int64_t, int64_t, int64_t,           \
                                                  GridSampleMode, GridSamplePadding, bool);     \
  template void affine_grid_3d_forward<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, bool); \
  template void affine_grid_3d_backward<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, bool);
TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
#undef TG_INSTANTIATE
#define TG_INSTANTIATE_16(T)                                                                    \
  template void grid_sample_2d_forward<T>(const T*, const T*, T*, int64_t, int64_t, int64_t,    \
                                          int64_t, int64_t, int64_t, GridSampleMode,            \
                                          GridSamplePadding, bool);                             \
  template void grid_sample_2d_backward<T>(const T*, const T*, const T*, T*, T*, int64_t,       \
                                           int64_t, int64_t, int64_t, int64_t, int64_t,         \
                                           GridSampleMode, GridSamplePadding, bool);
TG_INSTANTIATE_16(BFloat16)
TG_INSTANTIATE_16(Float16)
#undef TG_INSTANTIATE_16
#define TG_INSTANTIATE_3D(T)                                                                    \
  template void grid_sample_3d_forward<T>(const T*, const T*, T*, int64_t, int64_t, int64_t,    \
                                          int64_t, int64_t, int64_t, int64_t, int64_t,          \
                                          GridSampleMode, GridSamplePadding, bool);             \
  template void grid_sample_3d_backward<T>(const T*, const T*, const T*, T*, T*, int64_t,       \
                                           int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, \
                                           int64_t, GridSampleMode, GridSamplePadding, bool);
TG_INSTANTIATE_3D(float)
TG_INSTANTIATE_3D(double)
TG_INSTANTIATE_3D(BFloat16)
TG_INSTANTIATE_3D(Float16)
#undef TG_INSTANTIATE_3D

}  // namespace tg::kernels
