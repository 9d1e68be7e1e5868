// The fast decode path (LoaderOptions::exact_decode = false): region-of-interest JPEG decoding is
// pixel-exact, DCT-scaled decoding has libjpeg's sizes, the fast sample keeps exact mode's crop
// geometry with close pixels, tiny and huge images work (huge ones in bounded memory), and every
// kind of bad file is an rn50::Error naming the file.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
// jpeglib.h needs size_t and FILE first.
#include <jpeglib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/check.h"
#include "data/decode.h"
#include "data/rng.h"
#include "data/sample.h"
#include "data/transforms.h"
#include "data_test_util.h"

using namespace rn50;
using namespace rn50::data;
using namespace rn50::testutil;

namespace {

struct Diff {
  double mean = 0;
  int max = 0;
};
Diff diff(const uint8_t* a, const uint8_t* b, size_t n) {
  Diff d;
  for (size_t i = 0; i < n; ++i) {
    const int v = std::abs(int(a[i]) - int(b[i]));
    d.mean += v;
    d.max = std::max(d.max, v);
  }
  d.mean /= double(n);
  return d;
}

/// Named JPEG variants: subsampling, gray, CMYK (stored as YCCK by TurboJPEG), progressive.
struct JpegKind {
  const char* name;
  int pf, subsamp, flags;
};
const JpegKind kKinds[] = {
    {"rgb420", TJPF_RGB, TJSAMP_420, 0}, {"rgb422", TJPF_RGB, TJSAMP_422, 0},
    {"rgb444", TJPF_RGB, TJSAMP_444, 0}, {"gray", TJPF_GRAY, TJSAMP_GRAY, 0},
    {"cmyk", TJPF_CMYK, TJSAMP_444, 0},  {"progressive", TJPF_RGB, TJSAMP_420, TJFLAG_PROGRESSIVE}};

TEST(FastDecode, ChooseDctScale) {
  EXPECT_EQ(choose_dct_scale(224, 224, 224, 224), 8);
  EXPECT_EQ(choose_dct_scale(447, 900, 224, 224), 8);
  EXPECT_EQ(choose_dct_scale(448, 448, 224, 224), 4);
  EXPECT_EQ(choose_dct_scale(900, 500, 224, 224), 4);
  EXPECT_EQ(choose_dct_scale(900, 900, 224, 224), 2);
  EXPECT_EQ(choose_dct_scale(1792, 1792, 224, 224), 1);
  EXPECT_EQ(choose_dct_scale(5000, 5000, 224, 224), 1);
  EXPECT_EQ(choose_dct_scale(1, 1, 224, 224), 8);
  EXPECT_EQ(choose_dct_scale(500, 375, 341, 256), 8);  // eval of an ImageNet-sized image
}

TEST(FastDecode, RegionAtFullScaleEqualsTheWholeDecode) {
  std::mt19937 g(7);
  for (const JpegKind& k : kKinds) {
    SCOPED_TRACE(k.name);
    const int w = 237, h = 181;  // partial iMCUs on both axes
    const std::vector<uint8_t> jpg = make_jpeg(w, h, 11, k.pf, k.subsamp, 90, k.flags);
    Image full;
    decode_image(jpg.data(), jpg.size(), k.name, full);
    ScaledRegion reg;
    for (int t = 0; t < 25; ++t) {
      const int x0 = int(g() % (w - 1)), y0 = int(g() % (h - 1));
      const int x1 = x0 + 1 + int(g() % (w - x0)), y1 = y0 + 1 + int(g() % (h - y0));
      decode_jpeg_region(
          jpg.data(), jpg.size(), k.name,
          [&](const JpegFrame& f) {
            EXPECT_EQ(f.width, w);
            EXPECT_EQ(f.height, h);
            return RegionPlan{8, x0, y0, x1, y1};
          },
          reg);
      ASSERT_LE(reg.x0, x0);
      ASSERT_EQ(reg.y0, y0);
      ASSERT_GE(reg.x0 + reg.image.width, x1);
      ASSERT_EQ(reg.image.height, y1 - y0);
      int bad = 0;
      for (int y = y0; y < y1; ++y) {
        const uint8_t* a =
            reg.image.pixels.data() + (size_t(y - y0) * reg.image.width + size_t(x0 - reg.x0)) * 3;
        const uint8_t* b = full.pixels.data() + (size_t(y) * w + x0) * 3;
        bad += std::memcmp(a, b, size_t(x1 - x0) * 3) != 0;
      }
      EXPECT_EQ(bad, 0) << "rows differing in region [" << x0 << ", " << x1 << ") x [" << y0 << ", "
                        << y1 << ")";
    }
  }
}

TEST(FastDecode, DctScalingHasLibjpegSizesAndAveragesBlocks) {
  const int w = 483, h = 361;
  for (const JpegKind& k : kKinds) {
    SCOPED_TRACE(k.name);
    const std::vector<uint8_t> jpg = make_jpeg(w, h, 3, k.pf, k.subsamp, 95, k.flags);
    Image full;
    decode_image(jpg.data(), jpg.size(), k.name, full);
    for (int n : {1, 2, 4}) {
      SCOPED_TRACE(n);
      ScaledRegion reg;
      bool scalable = true;
      decode_jpeg_region(
          jpg.data(), jpg.size(), k.name,
          [&](const JpegFrame& f) {
            scalable = f.scalable;
            return RegionPlan{n, 0, 0, (f.width * n + 7) / 8, (f.height * n + 7) / 8};
          },
          reg);
      // 4:2:2 is flagged: libjpeg-turbo's scaled decoding misplaces its chroma (JpegFrame).
      EXPECT_EQ(scalable, k.subsamp != TJSAMP_422);
      if (!scalable) continue;
      ASSERT_EQ(reg.scaled_width, (w * n + 7) / 8);
      ASSERT_EQ(reg.scaled_height, (h * n + 7) / 8);
      ASSERT_EQ(reg.image.width, reg.scaled_width);
      ASSERT_EQ(reg.image.height, reg.scaled_height);
      // Scaled pixel (X, Y) ~ the mean of its f x f source block (f = 8 / n).
      const int f = 8 / n;
      double sum = 0;
      int count = 0;
      for (int Y = 0; Y < h / f; ++Y) {
        for (int X = 0; X < w / f; ++X) {
          for (int c = 0; c < 3; ++c) {
            int acc = 0;
            for (int y = 0; y < f; ++y) {
              for (int x = 0; x < f; ++x)
                acc += full.pixels[(size_t(Y * f + y) * w + X * f + x) * 3 + c];
            }
            sum += std::abs(acc / double(f * f) -
                            reg.image.pixels[(size_t(Y) * reg.image.width + X) * 3 + c]);
            ++count;
          }
        }
      }
      EXPECT_LT(sum / count, 4.0);
    }
  }
}

/// Runs process_sample in both modes with the same rng seed.
struct Pair {
  SampleInfo exact, fast;
  std::vector<uint8_t> a, b;
};
Pair both_modes(const std::vector<uint8_t>& file, bool train, int crop, uint64_t seed,
                const CropRanges& ranges = {}) {
  Pair p;
  p.a.resize(size_t(crop) * crop * 3);
  p.b.resize(p.a.size());
  SampleScratch scratch;
  SampleSpec s;
  s.train = train;
  s.crop = crop;
  s.resize_short = crop * 8 / 7;
  s.exact = true;
  s.ranges = ranges;
  SampleRng r1(seed, 0, 0);
  p.exact = process_sample(file.data(), file.size(), "x.jpg", s, &r1, p.a.data(), scratch);
  s.exact = false;
  SampleRng r2(seed, 0, 0);
  p.fast = process_sample(file.data(), file.size(), "x.jpg", s, &r2, p.b.data(), scratch);
  return p;
}

// --rand-crop-scale / --rand-crop-ratio reach RandomResizedCrop in both decode modes: a fixed
// area fraction and ratio give a fixed box size; scale 1 at the image's own ratio, the image.
TEST(FastSample, CropRangesReachBothModes) {
  const std::vector<uint8_t> jpg = make_jpeg(400, 300, 5);
  for (uint64_t seed = 0; seed < 4; ++seed) {
    Pair p = both_modes(jpg, true, 64, seed, {0.25, 0.25, 1.0, 1.0});
    for (const SampleInfo* i : {&p.exact, &p.fast}) {
      EXPECT_EQ(i->box.width, 173);  // round(sqrt(0.25 * 400 * 300))
      EXPECT_EQ(i->box.height, 173);
    }
    EXPECT_EQ(p.exact.box, p.fast.box);
    p = both_modes(jpg, true, 64, seed, {1.0, 1.0, 4.0 / 3.0, 4.0 / 3.0});
    EXPECT_EQ(p.fast.box.width, 400);
    EXPECT_EQ(p.fast.box.height, 300);
    EXPECT_EQ(p.exact.box, p.fast.box);
  }
}

TEST(FastSample, SameCropsAndFlipsAsExactModeAndClosePixels) {
  int scaled = 0, region = 0;
  for (const JpegKind& k : kKinds) {
    for (auto [w, h] : {std::pair{500, 375}, std::pair{1200, 900}, std::pair{300, 1000}}) {
      SCOPED_TRACE(std::string(k.name) + " " + std::to_string(w) + "x" + std::to_string(h));
      const std::vector<uint8_t> jpg = make_jpeg(w, h, uint64_t(w), k.pf, k.subsamp, 90, k.flags);
      for (uint64_t seed = 0; seed < 6; ++seed) {
        const Pair p = both_modes(jpg, true, 112, seed);
        EXPECT_EQ(p.exact.box, p.fast.box);  // the crop geometry is identical
        EXPECT_EQ(p.exact.flip, p.fast.flip);
        EXPECT_EQ(p.exact.width, w);
        EXPECT_EQ(p.fast.height, h);
        const Diff d = diff(p.a.data(), p.b.data(), p.a.size());
        scaled += p.fast.scale_num < 8;
        region += p.fast.region;
        if (p.fast.scale_num == 8) {  // exact ROI pixels, only the resampler's rounding differs
          EXPECT_LE(d.max, 2) << "seed " << seed;
          EXPECT_LT(d.mean, 0.05) << "seed " << seed;
        } else {  // DCT-domain downscaling: a different (box-like) prefilter
          EXPECT_LT(d.mean, 3.0) << "seed " << seed << " scale " << p.fast.scale_num;
        }
      }
      const Pair v = both_modes(jpg, false, 112, 0);
      const Diff d = diff(v.a.data(), v.b.data(), v.a.size());
      EXPECT_LT(d.mean, v.fast.scale_num == 8 ? 0.05 : 3.0);
    }
  }
  EXPECT_GT(scaled, 10);  // both the scaled and the region paths were exercised
  EXPECT_GT(region, 10);
}

TEST(FastSample, PngAndTinyImagesWorkInBothModes) {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> files;
  files.emplace_back("png", make_png(97, 61, 1));
  for (auto [w, h] : {std::pair{1, 1}, std::pair{1, 9}, std::pair{9, 1}, std::pair{2, 2}}) {
    files.emplace_back("jpeg " + std::to_string(w) + "x" + std::to_string(h),
                       make_jpeg(w, h, 5, TJPF_RGB, TJSAMP_420));
    files.emplace_back("png " + std::to_string(w) + "x" + std::to_string(h), make_png(w, h, 5));
  }
  for (const auto& [name, file] : files) {
    SCOPED_TRACE(name);
    for (bool train : {true, false}) {
      const Pair p = both_modes(file, train, 24, 3);
      EXPECT_EQ(p.exact.box, p.fast.box);
      EXPECT_LE(diff(p.a.data(), p.b.data(), p.a.size()).max, 2);
    }
  }
  // A 1x1 image gives a constant crop of its colour.
  const std::vector<uint8_t> one = make_png(1, 1, 9);
  Image img;
  decode_image(one.data(), one.size(), "one.png", img);
  const Pair p = both_modes(one, true, 16, 1);
  for (size_t i = 0; i < p.b.size(); ++i) ASSERT_EQ(p.b[i], img.pixels[i % 3]);
}

TEST(FastSample, EvalCropLargerThanTheResizedImageIsPaddedAsInExactMode) {
  // CenterCrop(32) of Resize(20): torchvision zero-pads; the fast path decodes the whole image
  // and uses the exact transform, so both modes agree exactly.
  const std::vector<uint8_t> jpg = make_jpeg(90, 60, 2);
  std::vector<uint8_t> a(32 * 32 * 3), b(a.size());
  SampleScratch scratch;
  SampleSpec s{false, 32, 20, true};
  process_sample(jpg.data(), jpg.size(), "pad.jpg", s, nullptr, a.data(), scratch);
  s.exact = false;
  process_sample(jpg.data(), jpg.size(), "pad.jpg", s, nullptr, b.data(), scratch);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a[0], 0);  // top-left corner is padding
}

TEST(FastSample, EveryKindOfBadFileIsAnErrorNamingIt) {
  const std::vector<uint8_t> jpg = make_jpeg(120, 90, 1);
  const std::vector<uint8_t> png = make_png(40, 30, 1);
  std::vector<std::pair<std::string, std::vector<uint8_t>>> bad = {
      {"empty.jpg", {}},
      {"truncated.jpg", std::vector<uint8_t>(jpg.begin(), jpg.begin() + long(jpg.size() * 6 / 10))},
      {"no_eoi.jpg", std::vector<uint8_t>(jpg.begin(), jpg.end() - 2)},
      {"header_only.jpg", std::vector<uint8_t>(jpg.begin(), jpg.begin() + 200)},
      {"truncated.png", std::vector<uint8_t>(png.begin(), png.begin() + long(png.size() / 2))},
      {"text.jpg", std::vector<uint8_t>{'h', 'e', 'l', 'l', 'o'}},
  };
  std::mt19937 g(3);
  std::vector<uint8_t> random(5000);
  for (auto& b : random) b = uint8_t(g());
  random[0] = 0x12;  // not a JPEG/PNG signature by chance
  bad.emplace_back("random.jpg", random);
  std::vector<uint8_t> out(32 * 32 * 3);
  SampleScratch scratch;
  for (const auto& [name, bytes] : bad) {
    for (bool exact : {true, false}) {
      for (bool train : {true, false}) {
        SCOPED_TRACE(name + (exact ? " exact" : " fast") + (train ? " train" : " val"));
        SampleSpec s{train, 32, 36, exact};
        SampleRng rng(0, 0, 0);
        try {
          process_sample(bytes.data(), bytes.size(), "/data/" + name, s, &rng, out.data(), scratch);
          ADD_FAILURE() << "no error";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("/data/" + name), std::string::npos) << e.what();
        }
      }
    }
  }
  // ...and a good file decodes afterwards on the same thread (decoder state was reset).
  SampleSpec s{true, 32, 36, false};
  SampleRng rng(0, 0, 0);
  EXPECT_NO_THROW(process_sample(jpg.data(), jpg.size(), "good.jpg", s, &rng, out.data(), scratch));
  // A PNG behind a .JPEG name decodes by its magic bytes.
  EXPECT_NO_THROW(process_sample(png.data(), png.size(), "png.JPEG", s, &rng, out.data(), scratch));
}

/// A smooth w x h baseline JPEG written row by row through libjpeg (no full-size buffer).
std::vector<uint8_t> huge_jpeg(int w, int h) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = JDIMENSION(w);
  c.image_height = JDIMENSION(h);
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 75, TRUE);
  jpeg_start_compress(&c, TRUE);
  std::vector<uint8_t> row(size_t(w) * 3);
  while (c.next_scanline < c.image_height) {
    const int y = int(c.next_scanline);
    for (int x = 0; x < w; ++x) {
      row[size_t(x) * 3 + 0] = uint8_t(x / 40);
      row[size_t(x) * 3 + 1] = uint8_t(y / 40);
      row[size_t(x) * 3 + 2] = uint8_t((x + y) / 80);
    }
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  std::vector<uint8_t> out(buf, buf + size);
  jpeg_destroy_compress(&c);
  free(buf);
  return out;
}

/// Runs `fn` in a child process; returns the child's peak RSS (which starts at this process's
/// RSS: the pages it inherits) minus this process's RSS at the fork, in MiB; NaN when the child
/// failed.
template <class Fn>
double child_peak_rss_growth_mib(Fn fn) {
  const int64_t before = rss_bytes();
  const pid_t pid = fork();
  if (pid == 0) {
    int rc = 0;
    try {
      fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      rc = 1;
    }
    _exit(rc);
  }
  int status = 0;
  rusage u{};
  if (wait4(pid, &status, 0, &u) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return std::nan("");
  }
  return (double(u.ru_maxrss) * 1024.0 - double(before)) / (1 << 20);
}

TEST(FastSample, HugeImagesDecodeAtReducedScaleInBoundedMemory) {
  const int n = 10000;  // 1e8 pixels: 300 MB decoded at full size
  const std::vector<uint8_t> jpg = huge_jpeg(n, n);
  const std::vector<uint8_t> png = make_png_rows(n, n, PNG_COLOR_TYPE_RGB, [&](int y, uint8_t* r) {
    for (int x = 0; x < n; ++x) {
      r[3 * x] = uint8_t(x / 40);
      r[3 * x + 1] = uint8_t(y / 40);
      r[3 * x + 2] = 7;
    }
  });
  std::printf("huge test files: JPEG %zu bytes, PNG %zu bytes\n", jpg.size(), png.size());
  auto run = [&](const std::vector<uint8_t>& file, bool exact, bool train) {
    return child_peak_rss_growth_mib([&] {
      std::vector<uint8_t> out(224 * 224 * 3);
      SampleScratch scratch;
      SampleSpec s{train, 224, 256, exact};
      SampleRng rng(1, 0, 0);
      const SampleInfo info =
          process_sample(file.data(), file.size(), "huge", s, &rng, out.data(), scratch);
      RN50_CHECK(info.width == n && info.height == n, "bad size");
      RN50_CHECK(info.scale_num < 8 || info.reduce > 1, "not reduced");
      // The gradient survives: the center pixel is about (x / 40, y / 40) of the source.
      const int cx = 112 * 3 + 112 * 224 * 3;
      RN50_CHECK(std::abs(int(out[cx + 2]) - int(out[cx]) / 2 - int(out[cx + 1]) / 2) < 20 ||
                     file.size() == png.size(),
                 "garbled output");
    });
  };
  for (bool exact : {false, true}) {
    for (bool train : {true, false}) {
      const double mib = run(jpg, exact, train);
      std::printf("10000x10000 JPEG, %s %s: peak RSS growth %.1f MiB\n", exact ? "exact" : "fast",
                  train ? "train" : "val", mib);
      EXPECT_FALSE(std::isnan(mib)) << "decode failed";
      EXPECT_LT(mib, 150) << (exact ? "exact" : "fast") << (train ? " train" : " val");
    }
  }
  for (bool train : {true, false}) {
    const double mib = run(png, !train, train);
    std::printf("10000x10000 PNG, %s: peak RSS growth %.1f MiB\n", train ? "train" : "val", mib);
    EXPECT_FALSE(std::isnan(mib)) << "decode failed";
    EXPECT_LT(mib, 150);
  }
}

}  // namespace
