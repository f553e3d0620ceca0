// The user-facing outputs: the history CSV round trip, the PNG sheet's pixels (boxes drawn where
// they belong, in their colours) and its PNG encoding.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "detr/curves.h"
#include "detr/image_sheet.h"

namespace tg::detr {
namespace {

std::array<uint8_t, 3> pixel(const RgbImage& img, int64_t x, int64_t y) {
  const uint8_t* p = &img.pixels[(y * img.width + x) * 3];
  return {p[0], p[1], p[2]};
}

TEST(DetrOutputs, HistoryCsvRoundTrips) {
  std::vector<EpochRecord> h = {{1, 6.123456789012345, 0.01, 0.002, 12.5, 80}, {2, 1.0 / 3.0, 0.5, 0.25, 11, 90.5}};
  const std::string csv = history_csv(h);
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "epoch,train_loss,map50,map50_95,seconds,images_per_second");
  std::vector<EpochRecord> back = parse_history_csv(csv);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].train_loss, 1.0 / 3.0);  // exact: %.17g
  EXPECT_EQ(back[0].epoch, 1);
  EXPECT_EQ(back[1].images_per_second, 90.5);
  EXPECT_THROW(parse_history_csv("nonsense"), Error);
  EXPECT_THROW(parse_history_csv("epoch,x\n1,2\n"), Error);
}

TEST(DetrOutputs, SheetDrawsTruthGreenAndPredictionsInClassColour) {
  SheetScene s;
  s.image = zeros({1, 16, 16});
  s.image.data<float>()[0] = 1.0f;                    // top-left pixel white
  s.truth.push_back({0, 1.0, {2, 2, 6, 6}});         // green, 1 px
  s.predictions.push_back({3, 0.9, {8, 8, 14, 14}});  // class 3's colour, 2 px
  RgbImage img = render_sheet({s}, 4, 2);             // scale 2, gap 4
  EXPECT_EQ(img.width, 16 * 2 + 2 * 4);
  EXPECT_EQ(img.height, 16 * 2 + 2 * 4);
  const int64_t o = 4;  // the cell's origin
  EXPECT_EQ(pixel(img, o, o), (std::array<uint8_t, 3>{255, 255, 255}));
  EXPECT_EQ(pixel(img, o + 2, o + 2), (std::array<uint8_t, 3>{0, 0, 0}));  // black canvas
  EXPECT_EQ(pixel(img, o + 4, o + 4), (std::array<uint8_t, 3>{40, 220, 60}));   // truth corner (2*2)
  EXPECT_EQ(pixel(img, o + 8, o + 11), (std::array<uint8_t, 3>{40, 220, 60}));  // truth right edge x = 12 - 1
  EXPECT_EQ(pixel(img, o + 6, o + 6), (std::array<uint8_t, 3>{0, 0, 0}));       // inside the truth box
  EXPECT_EQ(pixel(img, o + 16, o + 27), (std::array<uint8_t, 3>{80, 160, 255}));  // prediction left edge
  EXPECT_EQ(pixel(img, o + 17, o + 27), (std::array<uint8_t, 3>{80, 160, 255}));  // 2 px thick
  EXPECT_EQ(pixel(img, o + 15, o + 27), (std::array<uint8_t, 3>{0, 0, 0}));  // just outside it
  EXPECT_EQ(pixel(img, 0, 0), (std::array<uint8_t, 3>{48, 48, 48}));  // the gap
  // A PNG: the signature and an IHDR with our size.
  const std::string png = encode_png(img);
  ASSERT_GT(png.size(), 24u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(static_cast<uint8_t>(png[19]), img.width);
}

TEST(DetrOutputs, TextIsDrawn) {
  RgbImage img(40, 12);
  draw_text(img, 1, 1, "Bag", {255, 0, 0});
  int lit = 0;
  for (size_t i = 0; i < img.pixels.size(); i += 3) lit += img.pixels[i] == 255;
  EXPECT_GT(lit, 10);   // a few strokes per letter
  EXPECT_LT(lit, 200);  // but not a filled block
}

}  // namespace
}  // namespace tg::detr

namespace tg::detr {
namespace {

TEST(DetrOutputs, PlotWithoutGnuplotIsSkippedWithAMessage) {
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  setenv("PATH", "/nonexistent", 1);
  const std::string msg = plot_history({{1, 5.0, 0.1, 0.05, 10, 100}}, "/tmp/none.csv", "/tmp/tapegrad_detr_never.png");
  setenv("PATH", saved.c_str(), 1);
  EXPECT_NE(msg.find("gnuplot not found"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists("/tmp/tapegrad_detr_never.png"));
}

TEST(DetrOutputs, PlotWithGnuplotWritesAPng) {
  if (std::system("command -v gnuplot > /dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot is not installed";
  const std::string dir = (std::filesystem::temp_directory_path() / ("tapegrad_detr_plot_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  const std::vector<EpochRecord> history = {{1, 5.0, 0.1, 0.05, 10, 100}, {2, 4.0, 0.3, 0.12, 10, 100}};
  write_history_csv(dir + "/h.csv", history);
  EXPECT_EQ(plot_history(history, dir + "/h.csv", dir + "/c.png"), "");
  std::ifstream f(dir + "/c.png", std::ios::binary);
  std::string head(8, '\0');
  f.read(head.data(), 8);
  EXPECT_EQ(head, std::string("\x89PNG\r\n\x1a\n", 8));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tg::detr
