// Transforms: Pillow-exact bilinear resize (compared with PIL on random images), torchvision
// geometry of RandomResizedCrop / Resize / CenterCrop, and pixel parity of the full train/eval
// transforms with torchvision's functional ops.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/resize.h"
#include "data/rng.h"
#include "data/transforms.h"
#include "require.h"

namespace fs = std::filesystem;
using namespace rn50;
using namespace rn50::data;

namespace {

const char* const kPython = rn50::test::python();
const std::string kHelpers = std::string(RN50_SOURCE_DIR) + "/tests/data_helpers.py";

bool have_module(const std::string& mods) {
  return std::system(
             (std::string(kPython) + " -c 'import " + mods + "' >/dev/null 2>&1").c_str()) == 0;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

/// Random RGB image: noise (worst case for rounding) or smooth gradients with noise.
Image random_image(int w, int h, uint64_t seed, bool smooth = false) {
  std::mt19937_64 g(seed);
  Image img;
  img.width = w;
  img.height = h;
  img.pixels.resize(size_t(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) {
        int v = int(g() % 256);
        if (smooth) v = int(128 + 90 * std::sin(x / (4.0 + c) + y / 6.0)) + int(g() % 21) - 10;
        img.pixels[(size_t(y) * w + x) * 3 + c] = uint8_t(std::clamp(v, 0, 255));
      }
    }
  }
  return img;
}

struct TempDir {
  std::string path;
  explicit TempDir(const std::string& tag) {
    path = (fs::temp_directory_path() / ("rn50_test_" + tag + "_" + std::to_string(getpid())))
               .string();
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

/// Number of differing bytes and the largest |difference|.
std::pair<size_t, int> compare(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  size_t n = 0;
  int m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const int d = std::abs(int(a[i]) - int(b[i]));
    n += d != 0;
    m = std::max(m, d);
  }
  return {n, m};
}

struct ResizeCase {
  int iw, ih, ow, oh;
  bool has_box;
  ResizeBox box;
  bool smooth;
};

TEST(Resize, BitExactWithPil) {
  RN50_REQUIRE_OR_SKIP("torch", have_module("PIL, numpy"),
                       "needs the test python (RN50_TEST_PYTHON) with PIL and numpy");
  const std::vector<ResizeCase> cases = {
      {97, 61, 40, 23, false, {}, false},      // downscale, non-integer factors
      {13, 9, 50, 31, false, {}, false},       // upscale
      {100, 20, 37, 80, false, {}, false},     // down in x, up in y
      {64, 48, 64, 20, false, {}, false},      // vertical pass only
      {64, 48, 23, 48, false, {}, true},       // horizontal pass only
      {500, 400, 7, 5, false, {}, false},      // large factor (wide filter support)
      {333, 219, 224, 224, false, {}, true},   // a typical crop -> 224
      {224, 224, 224, 224, false, {}, false},  // identity (copy)
      {97, 61, 33, 21, true, {3.5f, 2.25f, 80.75f, 50.f}, false},  // Pillow box, fractional
      {97, 61, 97, 61, true, {10.f, 5.f, 60.f, 40.f}, true},       // box, upscale
      {1, 1, 5, 3, false, {}, false},                              // single pixel
      {301, 7, 3, 300, false, {}, false},
  };
  TempDir dir("resize");
  std::ofstream spec(dir.path + "/spec.txt");
  std::vector<Image> ours;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const Image in = random_image(c.iw, c.ih, 100 + i, c.smooth);
    const std::string ip = dir.path + "/in" + std::to_string(i) + ".raw";
    write_bytes(ip, in.pixels);
    spec << ip << " " << c.iw << " " << c.ih << " " << c.ow << " " << c.oh << " ";
    if (c.has_box) {
      spec << c.box.x0 << " " << c.box.y0 << " " << c.box.x1 << " " << c.box.y1 << " ";
    } else {
      spec << "- - - - ";
    }
    spec << dir.path << "/out" << i << ".raw\n";
    ours.push_back(
        resize_bilinear_aa(in, c.ow, c.oh, c.has_box ? std::optional(c.box) : std::nullopt));
  }
  spec.close();
  ASSERT_EQ(
      std::system(
          (std::string(kPython) + " " + kHelpers + " resize " + dir.path + "/spec.txt").c_str()),
      0);
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "case " << i << ": " << cases[i].iw << "x" << cases[i].ih
                                      << " -> " << cases[i].ow << "x" << cases[i].oh);
    const auto ref = read_bytes(dir.path + "/out" + std::to_string(i) + ".raw");
    ASSERT_EQ(ref.size(), ours[i].pixels.size());
    const auto [n, m] = compare(ours[i].pixels, ref);
    EXPECT_EQ(n, 0u) << "bytes differing from PIL, max |diff| " << m;
  }
}

TEST(Resize, WindowsEqualTheFullResult) {
  const Image in = random_image(211, 157, 7);
  for (auto [ow, oh] : {std::pair{90, 77}, std::pair{300, 250}, std::pair{211, 60}}) {
    const Image full = resize_bilinear_aa(in, ow, oh);
    const Rect win{ow / 5, oh / 3, ow / 2, oh / 2};
    std::vector<uint8_t> part(size_t(win.w) * win.h * 3);
    resize_bilinear_aa(view_of(in), ow, oh, nullptr, win, part.data(), win.w * 3);
    for (int y = 0; y < win.h; ++y) {
      for (int x = 0; x < win.w * 3; ++x) {
        ASSERT_EQ(part[size_t(y) * win.w * 3 + x],
                  full.pixels[(size_t(y + win.y) * ow + win.x) * 3 + x])
            << ow << "x" << oh << " at " << x / 3 << "," << y;
      }
    }
  }
}

TEST(Resize, RejectsBadArguments) {
  const Image in = random_image(10, 10, 1);
  EXPECT_THROW(resize_bilinear_aa(in, 0, 5), Error);
  EXPECT_THROW(resize_bilinear_aa(in, 5, 5, ResizeBox{0, 0, 11, 10}), Error);
  EXPECT_THROW(resize_bilinear_aa(in, 5, 5, ResizeBox{4, 0, 4, 10}), Error);
}

TEST(Geometry, RoundHalfEvenIsPythonRound) {
  EXPECT_EQ(round_half_even(0.5), 0);
  EXPECT_EQ(round_half_even(1.5), 2);
  EXPECT_EQ(round_half_even(2.5), 2);
  EXPECT_EQ(round_half_even(2.5000001), 3);
  EXPECT_EQ(round_half_even(37.5), 38);
  EXPECT_EQ(round_half_even(36.5), 36);
  EXPECT_EQ(round_half_even(-1.5), -2);
}

TEST(Geometry, ResizeShorterSideTruncatesLikeTorchvision) {
  EXPECT_EQ(resize_shorter_side(500, 375, 256), (std::pair{341, 256}));  // int(341.33)
  EXPECT_EQ(resize_shorter_side(375, 500, 256), (std::pair{256, 341}));
  EXPECT_EQ(resize_shorter_side(256, 256, 256), (std::pair{256, 256}));
  EXPECT_EQ(resize_shorter_side(333, 219, 256), (std::pair{389, 256}));  // int(389.26)
  EXPECT_EQ(resize_shorter_side(640, 480, 256), (std::pair{341, 256}));
  EXPECT_EQ(resize_shorter_side(3, 1000, 256), (std::pair{256, 85333}));
}

TEST(Geometry, CenterCropRoundsHalfToEvenAndPads) {
  EXPECT_EQ(center_crop_box(256, 341, 224, 224), (CropBox{16, 58, 224, 224}));  // 58.5 -> 58
  EXPECT_EQ(center_crop_box(299, 256, 224, 224), (CropBox{38, 16, 224, 224}));  // 37.5 -> 38
  EXPECT_EQ(center_crop_box(297, 256, 224, 224), (CropBox{36, 16, 224, 224}));  // 36.5 -> 36
  EXPECT_EQ(center_crop_box(20, 26, 24, 24), (CropBox{-2, 1, 24, 24}));         // pad rows
  EXPECT_EQ(center_crop_box(21, 21, 24, 24), (CropBox{-1, -1, 24, 24}));
}

TEST(Geometry, RandomResizedCropStaysInRangeAndIsDeterministic) {
  const double lo = std::log(3.0 / 4.0), hi = std::log(4.0 / 3.0);
  int flips = 0, n = 0;
  double area_sum = 0;
  for (auto [h, w] : {std::pair{256, 256}, std::pair{375, 500}, std::pair{500, 333},
                      std::pair{224, 224}, std::pair{31, 47}}) {
    for (uint64_t i = 0; i < 2000; ++i) {
      SampleRng rng(42, 3, i);
      const CropBox b = random_resized_crop_box(h, w, rng);
      ASSERT_GE(b.top, 0);
      ASSERT_GE(b.left, 0);
      ASSERT_GT(b.height, 0);
      ASSERT_GT(b.width, 0);
      ASSERT_LE(b.top + b.height, h);
      ASSERT_LE(b.left + b.width, w);
      // w, h are rounded from sqrt(area * r), sqrt(area / r): allow the rounding (+-0.5 px).
      const double r_hi = (b.width + 0.5) / std::max(b.height - 0.5, 0.5);
      const double r_lo = std::max(b.width - 0.5, 0.0) / (b.height + 0.5);
      ASSERT_GE(std::log(r_hi), lo - 1e-9) << b.width << "x" << b.height;
      ASSERT_LE(std::log(r_lo), hi + 1e-9) << b.width << "x" << b.height;
      const double frac = double(b.width) * b.height / (double(w) * h);
      if (h >= 224) {
        ASSERT_GE((b.width + 0.5) * (b.height + 0.5) / (double(w) * h), 0.08 - 1e-9);
        area_sum += frac;
        ++n;
      }
      SampleRng again(42, 3, i);
      ASSERT_EQ(random_resized_crop_box(h, w, again), b);
      flips += SampleRng(42, 3, i).uniform() < 0.5;
    }
  }
  // Accepted crops: area fraction ~U(0.08, 1) minus rejected large ones -> mean a bit < 0.54.
  EXPECT_GT(area_sum / n, 0.40);
  EXPECT_LT(area_sum / n, 0.56);
  EXPECT_NEAR(flips / 10000.0, 0.5, 0.03);
  // Different keys give different crops.
  SampleRng a(1, 0, 0), b(1, 0, 1), c(1, 1, 0), d(2, 0, 0);
  const CropBox ba = random_resized_crop_box(500, 500, a);
  int same = (random_resized_crop_box(500, 500, b) == ba) +
             (random_resized_crop_box(500, 500, c) == ba) +
             (random_resized_crop_box(500, 500, d) == ba);
  EXPECT_EQ(same, 0);
}

TEST(Geometry, RandomResizedCropFallsBackToAClampedCenterCrop) {
  // Ten attempts cannot fit a crop with aspect in [3/4, 4/3] and >= 8% of the area into a
  // 1000x10 strip, so torchvision's fallback applies: ratio clamped to 4/3, centred.
  for (uint64_t i = 0; i < 50; ++i) {
    SampleRng rng(0, 0, i);
    EXPECT_EQ(random_resized_crop_box(10, 1000, rng), (CropBox{0, 493, 10, 13}));
    SampleRng rng2(0, 0, i);
    EXPECT_EQ(random_resized_crop_box(1000, 10, rng2), (CropBox{493, 0, 13, 10}));
  }
}

TEST(Transforms, MatchTorchvisionPixelForPixel) {
  RN50_REQUIRE_OR_SKIP("torch", have_module("PIL, numpy, torchvision"),
                       "needs the test python (RN50_TEST_PYTHON) with PIL, numpy and torchvision");
  TempDir dir("transforms");
  std::ofstream spec(dir.path + "/spec.txt");
  struct Expect {
    std::vector<uint8_t> pixels;
    std::string what;
  };
  std::vector<Expect> ours;
  int idx = 0;
  auto input = [&](const Image& img) {
    const std::string p = dir.path + "/in" + std::to_string(idx) + ".raw";
    write_bytes(p, img.pixels);
    return p + " " + std::to_string(img.width) + " " + std::to_string(img.height);
  };
  // Eval: Resize(s) + CenterCrop(c), including half-pixel centring and padding.
  struct EvalCase {
    int w, h, s, c;
  };
  for (const EvalCase& e :
       {EvalCase{333, 219, 256, 224}, EvalCase{219, 333, 256, 224}, EvalCase{500, 375, 256, 224},
        EvalCase{256, 299, 256, 224}, EvalCase{299, 256, 256, 224}, EvalCase{256, 297, 256, 224},
        EvalCase{40, 30, 32, 28}, EvalCase{30, 40, 20, 24}, EvalCase{224, 224, 256, 224}}) {
    const Image img = random_image(e.w, e.h, 1000 + idx, idx % 2 == 0);
    Expect x{std::vector<uint8_t>(size_t(e.c) * e.c * 3), ""};
    eval_transform(img, e.s, e.c, x.pixels.data());
    x.what = "eval " + std::to_string(e.w) + "x" + std::to_string(e.h);
    spec << "eval " << input(img) << " " << e.s << " " << e.c << " " << dir.path << "/out" << idx
         << ".raw\n";
    ours.push_back(std::move(x));
    ++idx;
  }
  // Train: RandomResizedCrop boxes from our RNG (+ flip), compared with F.resized_crop + hflip.
  for (auto [w, h] : {std::pair{333, 219}, std::pair{500, 375}, std::pair{224, 224},
                      std::pair{61, 47}, std::pair{1000, 10}}) {
    const Image img = random_image(w, h, 2000 + idx, idx % 2 == 1);
    for (int k = 0; k < 3; ++k) {
      SampleRng rng(7, 1, uint64_t(idx));
      Expect x{std::vector<uint8_t>(224 * 224 * 3), ""};
      const TrainAugmentation aug = train_transform(img, 224, rng, x.pixels.data());
      x.what = "rrc " + std::to_string(w) + "x" + std::to_string(h) + " box " +
               std::to_string(aug.box.left) + "," + std::to_string(aug.box.top) + " " +
               std::to_string(aug.box.width) + "x" + std::to_string(aug.box.height) +
               (aug.flip ? " flipped" : "");
      spec << "rrc " << input(img) << " " << aug.box.top << " " << aug.box.left << " "
           << aug.box.height << " " << aug.box.width << " 224 " << int(aug.flip) << " " << dir.path
           << "/out" << idx << ".raw\n";
      ours.push_back(std::move(x));
      ++idx;
    }
  }
  spec.close();
  ASSERT_EQ(
      std::system((std::string(kPython) + " " + kHelpers + " transforms " + dir.path + "/spec.txt")
                      .c_str()),
      0);
  for (int i = 0; i < idx; ++i) {
    SCOPED_TRACE(ours[size_t(i)].what);
    const auto ref = read_bytes(dir.path + "/out" + std::to_string(i) + ".raw");
    ASSERT_EQ(ref.size(), ours[size_t(i)].pixels.size());
    const auto [n, m] = compare(ours[size_t(i)].pixels, ref);
    EXPECT_EQ(n, 0u) << "bytes differing from torchvision, max |diff| " << m;
  }
}

}  // namespace
