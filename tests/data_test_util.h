// Shared helpers of the data-pipeline tests (tests/test_data_*.cpp): temporary folders and
// image files written in C++ (TurboJPEG, libpng), so the tests need no Python.
#pragma once

#include <gtest/gtest.h>
#include <png.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "rn50/data.h"

namespace rn50::testutil {

namespace fs = std::filesystem;

/// A fresh folder under the system temp dir, removed on destruction.
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

inline void write_bytes(const std::string& path, const void* data, size_t n) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}

inline void write_text(const std::string& path, const std::string& s) {
  write_bytes(path, s.data(), s.size());
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

/// Smooth gradients plus noise, `channels` interleaved (never constant).
inline std::vector<uint8_t> natural_pixels(int w, int h, int channels, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<uint8_t> px(size_t(w) * h * channels);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < channels; ++c) {
        const double v = 128 + 90 * std::sin(x / (6.0 + 2 * c) + y / (9.0 + c) + double(seed % 7));
        px[(size_t(y) * w + x) * channels + c] =
            uint8_t(std::clamp(int(v) + int(g() % 31) - 15, 0, 255));
      }
    }
  }
  return px;
}

/// JPEG bytes of a natural w x h image through TurboJPEG. pf: TJPF_RGB, TJPF_GRAY or TJPF_CMYK;
/// subsamp: TJSAMP_420 / 422 / 444 / GRAY; flags e.g. TJFLAG_PROGRESSIVE.
inline std::vector<uint8_t> make_jpeg(int w, int h, uint64_t seed, int pf = TJPF_RGB,
                                      int subsamp = TJSAMP_420, int quality = 90, int flags = 0) {
  const int ch = tjPixelSize[pf];
  const std::vector<uint8_t> px = natural_pixels(w, h, ch, seed);
  tjhandle t = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(t, px.data(), w, w * ch, h, pf, &buf, &size, subsamp, quality, flags);
  EXPECT_EQ(rc, 0) << tjGetErrorStr2(t);
  std::vector<uint8_t> out(buf, buf + size);
  tjFree(buf);
  tjDestroy(t);
  return out;
}

inline void write_jpeg(const std::string& path, int w, int h, uint64_t seed, int pf = TJPF_RGB,
                       int subsamp = TJSAMP_420, int flags = 0) {
  const std::vector<uint8_t> b = make_jpeg(w, h, seed, pf, subsamp, 90, flags);
  write_bytes(path, b.data(), b.size());
}

/// PNG bytes through libpng: color_type PNG_COLOR_TYPE_RGB / GRAY / RGBA, 8-bit, rows produced
/// by `row(y, buffer)` one at a time (so huge images need no full-size buffer).
template <class RowFn>
std::vector<uint8_t> make_png_rows(int w, int h, int color_type, RowFn row, int level = 1) {
  std::vector<uint8_t> out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    ADD_FAILURE() << "libpng write failed";
    return {};
  }
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep d, png_size_t n) {
        auto* o = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(p));
        o->insert(o->end(), d, d + n);
      },
      nullptr);
  png_set_IHDR(png, info, w, h, 8, color_type, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_set_compression_level(png, level);
  png_write_info(png, info);
  const int ch = color_type == PNG_COLOR_TYPE_GRAY ? 1 : color_type == PNG_COLOR_TYPE_RGBA ? 4 : 3;
  std::vector<uint8_t> r(size_t(w) * ch);
  for (int y = 0; y < h; ++y) {
    row(y, r.data());
    png_write_row(png, r.data());
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

/// A natural w x h RGB PNG.
inline std::vector<uint8_t> make_png(int w, int h, uint64_t seed) {
  const std::vector<uint8_t> px = natural_pixels(w, h, 3, seed);
  return make_png_rows(w, h, PNG_COLOR_TYPE_RGB, [&](int y, uint8_t* r) {
    std::copy_n(px.data() + size_t(y) * w * 3, size_t(w) * 3, r);
  });
}

inline void write_png(const std::string& path, int w, int h, uint64_t seed) {
  const std::vector<uint8_t> b = make_png(w, h, seed);
  write_bytes(path, b.data(), b.size());
}

/// Resident set size of this process in bytes (/proc/self/statm).
inline int64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

/// All batches of one epoch of `src`, deep-copied.
inline std::vector<Batch> run_epoch(DataSource& src, int epoch) {
  src.start_epoch(epoch);
  std::vector<Batch> out;
  Batch b;
  while (src.next(b)) out.push_back({b.images.clone(), b.labels.clone(), b.size});
  return out;
}

/// Whether two epochs hold the same batches: sizes, the valid rows' pixels and labels.
inline bool same_batches(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size != b[i].size) return false;
    const size_t img = size_t(a[i].size) * a[i].images.nbytes() / size_t(a[i].images.dim(0));
    if (std::memcmp(a[i].images.data(), b[i].images.data(), img) != 0) return false;
    if (std::memcmp(a[i].labels.data(), b[i].labels.data(), size_t(a[i].size) * 4) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace rn50::testutil
