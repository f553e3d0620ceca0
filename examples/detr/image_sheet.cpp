#include "image_sheet.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <stb_easy_font.h>
#include <stb_image_write.h>

#include "scenes.h"

namespace tg::detr {
namespace {

constexpr std::array<uint8_t, 3> kTruthColor = {40, 220, 60};
// One colour per class for predictions (none of them green, the truth's colour).
constexpr std::array<uint8_t, 3> kClassColors[10] = {{255, 80, 80},  {255, 160, 40}, {255, 230, 60}, {80, 160, 255},
                                                     {200, 90, 255}, {255, 100, 200}, {90, 230, 230}, {250, 250, 250},
                                                     {180, 140, 90}, {140, 140, 255}};

}  // namespace

void RgbImage::set(int64_t x, int64_t y, std::array<uint8_t, 3> c) {
  if (x < 0 || y < 0 || x >= width || y >= height) return;
  uint8_t* p = &pixels[static_cast<size_t>((y * width + x) * 3)];
  p[0] = c[0], p[1] = c[1], p[2] = c[2];
}

void draw_rect(RgbImage& img, double x0, double y0, double x1, double y1, std::array<uint8_t, 3> color, int thickness) {
  const int64_t a = std::lround(x0), b = std::lround(y0), c = std::lround(x1) - 1, d = std::lround(y1) - 1;
  for (int t = 0; t < thickness; ++t) {
    for (int64_t x = a + t; x <= c - t; ++x) img.set(x, b + t, color), img.set(x, d - t, color);
    for (int64_t y = b + t; y <= d - t; ++y) img.set(a + t, y, color), img.set(c - t, y, color);
  }
}

void draw_text(RgbImage& img, int64_t x, int64_t y, const std::string& text, std::array<uint8_t, 3> color, int scale) {
  // stb_easy_font emits axis-aligned quads (4 vertices of 16 bytes: x, y, z floats + RGBA).
  static char buffer[64 * 1024];
  std::string copy = text;
  const int quads = stb_easy_font_print(0, 0, copy.data(), nullptr, buffer, sizeof buffer);
  for (int q = 0; q < quads; ++q) {
    float x0 = 1e9f, y0 = 1e9f, x1 = -1e9f, y1 = -1e9f;
    for (int v = 0; v < 4; ++v) {
      const float* p = reinterpret_cast<const float*>(buffer + (q * 4 + v) * 16);
      x0 = std::min(x0, p[0]), x1 = std::max(x1, p[0]), y0 = std::min(y0, p[1]), y1 = std::max(y1, p[1]);
    }
    for (int64_t py = static_cast<int64_t>(y0 * scale); py < static_cast<int64_t>(y1 * scale); ++py)
      for (int64_t px = static_cast<int64_t>(x0 * scale); px < static_cast<int64_t>(x1 * scale); ++px)
        img.set(x + px, y + py, color);
  }
}

RgbImage render_sheet(const std::vector<SheetScene>& scenes, int64_t cols, int64_t scale) {
  TG_CHECK(!scenes.empty() && cols >= 1 && scale >= 1, "render_sheet: expected scenes, cols >= 1 and scale >= 1");
  const int64_t S = scenes[0].image.size(-1), cell = S * scale, gap = 4;
  const int64_t rows = (static_cast<int64_t>(scenes.size()) + cols - 1) / cols;
  const int64_t ncols = std::min<int64_t>(cols, static_cast<int64_t>(scenes.size()));
  RgbImage img(ncols * cell + (ncols + 1) * gap, rows * cell + (rows + 1) * gap);
  std::fill(img.pixels.begin(), img.pixels.end(), 48);
  for (size_t i = 0; i < scenes.size(); ++i) {
    const SheetScene& s = scenes[i];
    TG_CHECK(s.image.size(-1) == S && s.image.numel() == S * S, "render_sheet: every scene must be ", S, "x", S);
    const int64_t ox = gap + (static_cast<int64_t>(i) % cols) * (cell + gap);
    const int64_t oy = gap + (static_cast<int64_t>(i) / cols) * (cell + gap);
    const std::vector<float> px = s.image.contiguous().to_vector<float>();
    for (int64_t y = 0; y < cell; ++y)
      for (int64_t x = 0; x < cell; ++x) {
        const uint8_t v = static_cast<uint8_t>(std::clamp(px[(y / scale) * S + x / scale], 0.0f, 1.0f) * 255.0f + 0.5f);
        img.set(ox + x, oy + y, {v, v, v});
      }
    auto place = [&](const std::array<double, 4>& b) {
      return std::array<double, 4>{ox + b[0] * scale, oy + b[1] * scale, ox + b[2] * scale, oy + b[3] * scale};
    };
    for (const SheetBox& t : s.truth) {
      auto b = place(t.xyxy);
      draw_rect(img, b[0], b[1], b[2], b[3], kTruthColor, 1);
    }
    for (const SheetBox& p : s.predictions) {
      auto b = place(p.xyxy);
      const auto color = kClassColors[((p.label % 10) + 10) % 10];
      draw_rect(img, b[0], b[1], b[2], b[3], color, 2);
      char label[64];
      std::snprintf(label, sizeof label, "%s %.2f", p.label >= 0 && p.label < 10 ? kFashionClassNames[p.label] : "?",
                    p.score);
      draw_text(img, static_cast<int64_t>(b[0]) + 2, static_cast<int64_t>(b[1]) + 3, label, color, 1);
    }
  }
  return img;
}

std::string encode_png(const RgbImage& img) {
  std::string out;
  auto append = [](void* ctx, void* data, int size) { static_cast<std::string*>(ctx)->append(static_cast<char*>(data), size); };
  const int ok = stbi_write_png_to_func(append, &out, static_cast<int>(img.width), static_cast<int>(img.height), 3,
                                        img.pixels.data(), static_cast<int>(img.width * 3));
  TG_CHECK(ok != 0, "encode_png: stb_image_write failed on a ", img.width, "x", img.height, " image");
  return out;
}

void save_png(const std::string& path, const RgbImage& img) { write_file_atomically(path, encode_png(img)); }

}  // namespace tg::detr
