// Convolution layers with PyTorch's names, argument order, parameter layout and initialisation:
// Conv1d, Conv2d, Conv3d and ConvTranspose1d/2d/3d. state_dict keys are "weight" and "bias", so a
// PyTorch checkpoint loads one to one.
//
// Weight: (out_channels, in_channels / groups, k...) and, transposed, (in_channels,
// out_channels / groups, k...). Init (torch.nn.modules.conv._ConvNd.reset_parameters):
// weight kaiming_uniform_(a = sqrt(5)), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
// fan_in = weight.size(1) * prod(k); bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with the same fan_in
// (for a transposed layer that is out_channels / groups * prod(k), as in PyTorch).
// padding takes every form tg::convolution takes (one value, one per dim, or (before, after) per
// dim) and, for Conv1d/2d/3d, PyTorch's strings "same" and "valid" (stored as the explicit
// padding they stand for, ops/conv/conv.h). padding_mode (Conv1d/2d/3d): "zeros" (the default),
// "reflect", "replicate" or "circular", as nn.Conv: other than zeros, the input is padded with
// tg::pad in that mode and then convolved without padding (so the limits of tg::pad apply: a
// reflect padding smaller than the input, circular only for a batched input in PyTorch 1.13).
// Transposed layers take only "zeros". Neither changes the state_dict. Each per-dim argument is one
// plain integer or a list (IntOrList): Conv2d(3, 8, 3, 1, 1) is Conv2d(3, 8, {3}, {1}, {1}).
#pragma once

#include <string>

#include "../framework/random.h"
#include "../ops/conv/conv.h"
#include "../ops/pad/pad.h"
#include "module.h"

namespace tg {

// A layer's padding: an int, a list or "same" / "valid" (text; the numbers then stay empty).
struct ConvPadding : IntOrList {
  using IntOrList::IntOrList;
  ConvPadding(const IntOrList& v) : IntOrList(v) {}  // NOLINT
  template <size_t N>
  ConvPadding(const char (&s)[N]) : text(s) {}  // NOLINT: implicit, as padding="same"
  template <class S, std::enable_if_t<std::is_same_v<S, std::string> || std::is_same_v<S, const char*>, int> = 0>
  ConvPadding(const S& s) : text(s) {}  // NOLINT
  std::string text;
};

// The shared part of the layers; use the named ones below.
class ConvNd : public Module {
 public:
  std::string name() const override { return layer_name_; }
  Tensor forward(const Tensor& x) override;
  void reset_parameters(Generator* gen = nullptr);

  int64_t in_channels, out_channels;
  IntList kernel_size, stride, padding, dilation, output_padding;  // one value per dim (padding as given)
  int64_t groups;
  bool transposed;
  std::string padding_mode;  // "zeros", "reflect", "replicate" or "circular"
  Tensor weight;
  Tensor bias;  // undefined when built without bias

 protected:
  ConvNd(const char* layer_name, int dims, bool transposed, int64_t in_channels, int64_t out_channels,
         const IntList& kernel_size, const IntList& stride, const ConvPadding& padding, const IntList& dilation,
         const IntList& output_padding, int64_t groups, bool bias, const std::string& padding_mode, DType dtype,
         Generator* gen);

 private:
  std::string layer_name_;
  int dims_;
  IntList mode_pad_;  // padding_mode other than zeros: tg::pad's list (last dim first)
};

class Conv1d : public ConvNd {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, const IntOrList& kernel_size, const IntOrList& stride = 1,
         const ConvPadding& padding = 0, const IntOrList& dilation = 1, int64_t groups = 1, bool bias = true,
         DType dtype = DType::Float32, Generator* gen = nullptr);
  // PyTorch's order: padding_mode after bias, before dtype.
  Conv1d(int64_t in_channels, int64_t out_channels, const IntOrList& kernel_size, const IntOrList& stride,
         const ConvPadding& padding, const IntOrList& dilation, int64_t groups, bool bias,
         const std::string& padding_mode, DType dtype = DType::Float32, Generator* gen = nullptr);
};

class Conv2d : public ConvNd {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, const IntOrList& kernel_size, const IntOrList& stride = 1,
         const ConvPadding& padding = 0, const IntOrList& dilation = 1, int64_t groups = 1, bool bias = true,
         DType dtype = DType::Float32, Generator* gen = nullptr);
  // PyTorch's order: padding_mode after bias, before dtype.
  Conv2d(int64_t in_channels, int64_t out_channels, const IntOrList& kernel_size, const IntOrList& stride,
         const ConvPadding& padding, const IntOrList& dilation, int64_t groups, bool bias,
         const std::string& padding_mode, DType dtype = DType::Float32, Generator* gen = nullptr);
};

class Conv3d : public ConvNd {
 public:
  Conv3d(int64_t in_channels, int64_t out_channels, const IntOrList& kernel_size, const IntOrList& stride = 1,
         const ConvPadding& padding = 0, const IntOrList& dilation = 1, int64_t groups = 1, bool bias = true,
         DType dtype = DType::Float32, Generator* gen = nullptr);
  // PyTorch's order: padding_mode after bias, before dtype.
  Conv3d(int64_t in_channels, int64_t out_channels, const IntOrList& kernel_size, const IntOrList& stride,
         const ConvPadding& padding, const IntOrList& dilation, int64_t groups, bool bias,
         const std::string& padding_mode, DType dtype = DType::Float32, Generator* gen = nullptr);
};

// Transposed layers, ConvTranspose1d/2d/3d. PyTorch's argument order: output_padding and groups
// come before bias and dilation.
template <int Dims>
class ConvTransposeNd : public ConvNd {
 public:
  ConvTransposeNd(int64_t in_channels, int64_t out_channels, const IntOrList& kernel_size, const IntOrList& stride = 1,
                  const IntOrList& padding = 0, const IntOrList& output_padding = 0, int64_t groups = 1,
                  bool bias = true, const IntOrList& dilation = 1, DType dtype = DType::Float32,
                  Generator* gen = nullptr)
      : ConvTransposeNd(in_channels, out_channels, kernel_size, stride, padding, output_padding, groups, bias,
                        dilation, "zeros", dtype, gen) {}
  // padding_mode: only "zeros", as PyTorch (any other is a tg::Error).
  ConvTransposeNd(int64_t in_channels, int64_t out_channels, const IntOrList& kernel_size, const IntOrList& stride,
                  const IntOrList& padding, const IntOrList& output_padding, int64_t groups, bool bias,
                  const IntOrList& dilation, const std::string& padding_mode, DType dtype = DType::Float32,
                  Generator* gen = nullptr)
      : ConvNd(kNames[Dims - 1], Dims, true, in_channels, out_channels, kernel_size, stride, IntOrList(padding),
               dilation, output_padding, groups, bias, padding_mode, dtype, gen) {}

 private:
  static constexpr const char* kNames[3] = {"ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"};
};

class ConvTranspose1d : public ConvTransposeNd<1> {
 public:
  using ConvTransposeNd<1>::ConvTransposeNd;
};
class ConvTranspose2d : public ConvTransposeNd<2> {
 public:
  using ConvTransposeNd<2>::ConvTransposeNd;
};
class ConvTranspose3d : public ConvTransposeNd<3> {
 public:
  using ConvTransposeNd<3>::ConvTransposeNd;
};

}  // namespace tg
