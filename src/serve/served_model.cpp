#include "serve/served_model.h"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <stdexcept>

#include "core/check.h"
#include "data/decode.h"
#include "data/transforms.h"

namespace rn50::serve {

namespace fs = std::filesystem;

DecodePool::DecodePool(int threads) {
  if (threads <= 0) {
    cpu_set_t set;
    threads = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  }
  for (int i = 0; i < std::max(1, threads); ++i)
    threads_.emplace_back([this] {
      while (true) {
        std::packaged_task<void()> task;
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
          if (tasks_.empty()) return;
          task = std::move(tasks_.front());
          tasks_.pop_front();
        }
        task();
      }
    });
}

DecodePool::~DecodePool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

std::future<void> DecodePool::submit(std::function<void()> task) {
  std::packaged_task<void()> p(std::move(task));
  std::future<void> f = p.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(p));
  }
  cv_.notify_one();
  return f;
}

Normalization ServedModel::norm() const {
  Normalization n;
  for (int c = 0; c < 3; ++c) {
    n.mean[c] = info.mean[static_cast<size_t>(c)];
    n.std[c] = info.std[static_cast<size_t>(c)];
  }
  return n;
}

namespace {

std::unique_ptr<ServedModel> load_model(const std::string& dir, const ServeOptions& opt) {
  auto m = std::make_unique<ServedModel>();
  m->dir = dir;
  m->name = fs::path(dir).lexically_normal().filename().string();
  if (m->name.empty() || m->name == ".")
    m->name = fs::path(dir).lexically_normal().parent_path().filename().string();
  RN50_CHECK(!m->name.empty() &&
                 m->name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                           "0123456789._-") == std::string::npos,
             "--model '{}': the folder name '{}' is the model's name in URLs and may hold only "
             "letters, digits, '.', '_' and '-'; rename the folder",
             dir, m->name);
  InferenceModel model = load_inference_model(dir);  // throws naming the folder
  m->info = model.info;
  m->arch = model.program.arch;
  m->num_classes = model.program.num_classes;
  EngineOptions eo;
  eo.device = opt.device;
  eo.precision = opt.precision.empty() ? model.info.precision : opt.precision;
  eo.batch_invariant = true;  // a request's answer must not depend on the batch it joins
  m->precision = eo.precision;
  m->device = resolve_device(opt.device).name;
  RN50_CHECK(opt.instances >= 1, "--instances {}: must be >= 1", opt.instances);
  for (int i = 0; i < opt.instances; ++i)
    m->engines.push_back(make_inference_engine(model.program, eo));
  return m;
}

/// Normalises `n` u8 crops (NHWC) into the engines' f32 input (NCHW).
Tensor normalised(const Tensor& u8, const ServedModel& m, Backend& host) {
  Tensor x = Tensor::empty(u8.shape(), DType::f32, Layout::NCHW);
  const Normalization nm = m.norm();
  host.normalize_u8(u8, nm.mean, nm.std, x);
  return x;
}

/// Decodes one encoded image into its eval crop at `dst` (crop x crop x 3).
void decode_crop(const std::string& bytes, const ServedModel& m, const std::string& what,
                 uint8_t* dst) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  data::ImageHeader h;
  try {
    h = data::read_image_header(data, bytes.size(), what);
  } catch (const Error& e) {
    throw HttpError(400, fmt::format("{} is not a JPEG or PNG image: {}", what, e.what()));
  }
  if (static_cast<int64_t>(h.width) * h.height > kMaxServedImagePixels)
    throw HttpError(400, fmt::format("{} is {}x{} pixels, over the server's limit of {} "
                                     "megapixels",
                                     what, h.width, h.height, kMaxServedImagePixels >> 20));
  Image img;
  try {
    data::decode_image(data, bytes.size(), what, img);
  } catch (const Error& e) {
    throw HttpError(400, fmt::format("{} cannot be decoded: {}", what, e.what()));
  }
  data::eval_transform(img, m.info.resize_short, m.crop(), dst);
}

}  // namespace

std::vector<std::unique_ptr<ServedModel>> load_models(const ServeOptions& opt) {
  std::vector<std::string> dirs = opt.models;
  if (!opt.model_repository.empty()) {
    RN50_CHECK(fs::is_directory(opt.model_repository),
               "--model-repository '{}': no such folder", opt.model_repository);
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(opt.model_repository))
      if (e.is_directory() && fs::exists(e.path() / kInferenceJsonFile))
        found.push_back(e.path().string());
    std::sort(found.begin(), found.end());
    RN50_CHECK(!found.empty(),
               "--model-repository '{}' holds no model (sub-folders with {}, written by rn50 "
               "export)",
               opt.model_repository, kInferenceJsonFile);
    dirs.insert(dirs.end(), found.begin(), found.end());
  }
  RN50_CHECK(!dirs.empty(),
             "rn50 serve: no model to serve; pass --model DIR (a folder rn50 export wrote) or "
             "--model-repository DIR");
  std::vector<std::unique_ptr<ServedModel>> models;
  std::set<std::string> names;
  for (const std::string& d : dirs) {
    models.push_back(load_model(d, opt));
    RN50_CHECK(names.insert(models.back()->name).second,
               "--model '{}': a model named '{}' is already served; give each a folder of its own "
               "name",
               d, models.back()->name);
  }
  return models;
}

Tensor request_images(const RequestInput& in, const ServedModel& m, DecodePool& pool,
                      Backend& host) {
  const int64_t n = in.batch(), crop = m.crop();
  if (in.datatype == DataType::fp32) {
    if (in.shape[2] != crop || in.shape[3] != crop)
      throw HttpError(400, fmt::format("input '{}': FP32 shape [{},{},{},{}] must be [N,3,{},{}] "
                                       "for model '{}' (its crop size); send UINT8 pixels or "
                                       "BYTES files of any size to have them resized",
                                       in.name, n, in.shape[1], in.shape[2], in.shape[3], crop,
                                       crop, m.name));
    Tensor nchw = Tensor::empty({n, 3, crop, crop}, DType::f32, Layout::NCHW);
    std::memcpy(nchw.data_as<float>(), in.f32.data(), in.f32.size() * sizeof(float));
    return nchw;
  }
  Tensor u8 = Tensor::empty({n, 3, crop, crop}, DType::u8, Layout::NHWC);
  uint8_t* dst = u8.data_as<uint8_t>();
  const size_t per = static_cast<size_t>(crop * crop * 3);
  if (in.datatype == DataType::uint8) {
    const int64_t h = in.shape[1], w = in.shape[2];
    if (h * w > kMaxServedImagePixels)
      throw HttpError(400, fmt::format("input '{}': {}x{} pixels per image is over the server's "
                                       "limit of {} megapixels",
                                       in.name, w, h, kMaxServedImagePixels >> 20));
    for (int64_t i = 0; i < n; ++i) {
      Image img;
      img.width = static_cast<int>(w);
      img.height = static_cast<int>(h);
      const auto* src = in.u8.data() + static_cast<size_t>(i * h * w * 3);
      img.pixels.assign(src, src + h * w * 3);
      data::eval_transform(img, m.info.resize_short, static_cast<int>(crop), dst + i * per);
    }
    return normalised(u8, m, host);
  }
  // An element's failure comes back as a value (status, message), and the request thread throws
  // its own HttpError: no exception object crosses threads, so none is destroyed on a pool
  // thread while the request thread may still read it (scripts/tsan.sh reported that pattern,
  // whose ordering lives in libstdc++'s uninstrumented exception_ptr count).
  struct Failure {
    int status = 0;  ///< 0: decoded; 400: a bad element; 500: anything else
    std::string message;
  };
  std::vector<Failure> failed(static_cast<size_t>(n));
  std::vector<std::future<void>> done;
  for (int64_t i = 0; i < n; ++i)
    done.push_back(pool.submit([&, i] {
      Failure& f = failed[static_cast<size_t>(i)];
      try {
        decode_crop(in.bytes[static_cast<size_t>(i)], m,
                    fmt::format("input '{}' element {}", in.name, i), dst + i * per);
      } catch (const HttpError& e) {
        f = {e.status(), e.what()};
      } catch (const std::exception& e) {
        f = {500, e.what()};
      } catch (...) {
        f = {500, "unknown error while decoding"};
      }
    }));
  for (std::future<void>& f : done) f.get();
  for (const Failure& f : failed) {
    if (f.status == 0) continue;
    if (f.status == 500) throw std::runtime_error(f.message);  // answered 500, as before
    throw HttpError(f.status, f.message);
  }
  return normalised(u8, m, host);
}

Tensor image_file_input(const std::string& bytes, const ServedModel& m, DecodePool& pool,
                        Backend& host) {
  RequestInput in;
  in.name = "body";
  in.datatype = DataType::bytes;
  in.shape = {1};
  in.bytes = {bytes};
  return request_images(in, m, pool, host);
}

}  // namespace rn50::serve
