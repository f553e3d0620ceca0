// A PNG contact sheet of validation scenes: each scene scaled up, true boxes in green,
// predicted boxes in a per-class colour with "class score" written above them (stb_easy_font),
// encoded by stb_image_write and written atomically.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace tg::detr {

struct RgbImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> pixels;  // RGB, row-major
  RgbImage(int64_t w, int64_t h) : width(w), height(h), pixels(static_cast<size_t>(w * h * 3), 0) {}
  void set(int64_t x, int64_t y, std::array<uint8_t, 3> c);  // clipped to the image
};

// Outline of [x0, x1) x [y0, y1), `thickness` pixels inward, clipped.
void draw_rect(RgbImage& img, double x0, double y0, double x1, double y1, std::array<uint8_t, 3> color,
               int thickness = 1);
// Text in stb_easy_font's 6-pixel-high font at (x, y), `scale` pixels per font unit.
void draw_text(RgbImage& img, int64_t x, int64_t y, const std::string& text, std::array<uint8_t, 3> color,
               int scale = 1);

struct SheetBox {
  int64_t label = 0;
  double score = 1;                 // unused for truths
  std::array<double, 4> xyxy{};     // canvas pixels
};

struct SheetScene {
  Tensor image;                     // float32 [1, S, S] in [0, 1]
  std::vector<SheetBox> truth, predictions;
};

// Scenes in a grid of `cols` columns, each scaled by `scale` and separated by a gap.
RgbImage render_sheet(const std::vector<SheetScene>& scenes, int64_t cols, int64_t scale);

// PNG bytes of an image (stb_image_write), and the atomic write of them to `path`.
std::string encode_png(const RgbImage& img);
void save_png(const std::string& path, const RgbImage& img);

}  // namespace tg::detr
