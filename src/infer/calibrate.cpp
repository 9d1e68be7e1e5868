// rn50 inference: INT8 post-training calibration (Calibrator, for_calibration_batches; see
// rn50/inference.h): the fp32 engine with an observer records per value the max |x| or a
// histogram of |x| for the percentile method.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/check.h"
#include "data/decode.h"
#include "data/transforms.h"
#include "infer/engine_impl.h"
#include "rn50/backend.h"
#include "rn50/data.h"
#include "rn50/inference.h"

namespace rn50 {

namespace {

constexpr int kBins = 2048;

/// Histogram of |x| over [0, range), kBins equal bins; the range doubles (bins merged in pairs)
/// until a new maximum fits.
struct AbsHistogram {
  double range = 0;
  double max = 0;
  int64_t count = 0;
  std::vector<int64_t> bins = std::vector<int64_t>(kBins, 0);

  void add(const float* x, int64_t n) {
    float m = 0;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
    max = std::max(max, double(m));
    if (range == 0) range = m > 0 ? double(m) * (1 + 1e-6) : 1.0;
    while (m >= range) {
      for (int b = 0; b < kBins / 2; ++b) bins[b] = bins[2 * b] + bins[2 * b + 1];
      std::fill(bins.begin() + kBins / 2, bins.end(), 0);
      range *= 2;
    }
    const double per = kBins / range;
    for (int64_t i = 0; i < n; ++i) {
      const int b = std::min(kBins - 1, static_cast<int>(std::fabs(x[i]) * per));
      ++bins[static_cast<size_t>(b)];
    }
    count += n;
  }

  /// The upper edge of the bin holding the q-th percentile of |x| (never above the maximum).
  double percentile(double q) const {
    const double want = q / 100.0 * double(count);
    int64_t seen = 0;
    for (int b = 0; b < kBins; ++b) {
      seen += bins[static_cast<size_t>(b)];
      if (double(seen) >= want) return std::min(max, (b + 1) * range / kBins);
    }
    return max;
  }
};

}  // namespace

struct Calibrator::Impl {
  CalibrationConfig cfg;
  std::vector<std::string> value_names;  ///< the op writing each value, for messages
  std::unique_ptr<InferenceEngine> engine;
  std::vector<double> absmax;
  std::vector<AbsHistogram> hist;
  int64_t images = 0;
};

Calibrator::Calibrator(const InferenceProgram& program, const CalibrationConfig& cfg)
    : impl_(std::make_unique<Impl>()) {
  RN50_CHECK(cfg.method == "max" || cfg.method == "percentile",
             "--calib-method {}: expected max or percentile", cfg.method);
  RN50_CHECK(cfg.method != "percentile" || (cfg.percentile > 50 && cfg.percentile <= 100),
             "--calib-percentile {}: expected a value in (50, 100]", cfg.percentile);
  impl_->cfg = cfg;
  const size_t nv = program.producer.size();
  impl_->absmax.assign(nv, 0.0);
  if (cfg.method == "percentile") impl_->hist.resize(nv);
  InferenceProgram p = program;
  p.value_absmax.clear();
  impl_->value_names.assign(nv, "the input");
  for (const InferOp& op : program.ops)
    impl_->value_names.at(static_cast<size_t>(op.output)) = "'" + op.name + "'";
  Impl* impl = impl_.get();
  auto observe = [impl](const ObservedValue& o) {
    const auto i = static_cast<size_t>(o.value);
    const float* x = o.f32();
    const int64_t n = o.count;
    for (int64_t k = 0; k < n; ++k)
      RN50_CHECK(std::isfinite(x[k]),
                 "calibration: {} produced a non-finite value ({}) on the calibration images: "
                 "the model overflows fp32 there and cannot be quantized (check its weights and "
                 "BatchNorm statistics)",
                 impl->value_names[i], x[k]);
    if (!impl->hist.empty()) {
      impl->hist[i].add(x, n);
    } else {
      float m = 0;
      for (int64_t k = 0; k < n; ++k) m = std::max(m, std::fabs(x[k]));
      impl->absmax[i] = std::max(impl->absmax[i], double(m));
    }
  };
  impl_->engine = make_cpu_engine(std::move(p), EnginePrecision::fp32, std::move(observe));
}

Calibrator::~Calibrator() = default;

void Calibrator::add(const Tensor& images) {
  impl_->engine->run(images);
  impl_->images += images.n();
}

int64_t Calibrator::images() const { return impl_->images; }

std::vector<float> Calibrator::value_absmax() const {
  RN50_CHECK(impl_->images > 0, "calibration: no images were added");
  std::vector<float> out(impl_->absmax.size(), 0.f);
  for (size_t v = 0; v < out.size(); ++v)
    out[v] =
        static_cast<float>(impl_->hist.empty()    ? impl_->absmax[v]
                           : impl_->hist[v].count ? impl_->hist[v].percentile(impl_->cfg.percentile)
                                                  : 0.0);
  return out;
}

int64_t for_calibration_batches(const std::string& image_root, int count, int resize_short,
                                int crop, int batch,
                                const std::function<void(const Tensor&)>& consume,
                                const Normalization& norm) {
  RN50_CHECK(count >= 1, "--calib-images {}: must be >= 1", count);
  RN50_CHECK(batch >= 1, "calibration batch {}: must be >= 1", batch);
  const std::string train = (std::filesystem::path(image_root) / "train").string();
  const ImageFolderIndex index = ImageFolderIndex::scan(train);
  const int64_t total = static_cast<int64_t>(index.samples.size());
  RN50_CHECK(total > 0, "'{}': no images to calibrate with", train);
  const int64_t n = std::min<int64_t>(count, total);
  const int64_t bytes = int64_t{crop} * crop * 3;
  const int64_t rows = std::min<int64_t>(batch, n);
  Tensor u8 = Tensor::empty({rows, 3, crop, crop}, DType::u8, Layout::NHWC);
  auto host = make_backend("onednn");
  int64_t bad = 0, filled = 0;
  auto flush = [&] {
    if (filled == 0) return;
    Tensor x = Tensor::empty({filled, 3, crop, crop}, DType::f32, Layout::NCHW);
    host->normalize_u8(u8.slice0(0, filled), norm.mean, norm.std, x);
    consume(x);
    filled = 0;
  };
  for (int64_t i = 0; i < n; ++i) {
    const std::string& path = index.samples[static_cast<size_t>(i * total / n)].first;
    try {
      const Image img = data::decode_image_file(path);
      data::eval_transform(img, resize_short, crop, u8.data_as<uint8_t>() + filled * bytes);
    } catch (const std::exception&) {
      ++bad;
      continue;
    }
    if (++filled == rows) flush();
  }
  flush();
  return bad;
}

}  // namespace rn50
