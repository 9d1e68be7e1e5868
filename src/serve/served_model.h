// rn50 serve: the models a server holds — each an exported model folder (rn50 export) with its
// inference engines (--instances of them) — and the preprocessing that turns a request's input
// into the engines' input: f32 (N, 3, crop, crop) NCHW, normalised with the model's mean/std
// (the layout FP32 requests arrive in: one copy; the engine reorders the batch itself).
// The preprocessing is predict's (rn50 predict --model): PIL-exact decoding, Resize(resize_short)
// + CenterCrop(crop), Backend::normalize_u8 on the oneDNN backend, so a served image's logits
// equal predict's bit for bit.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rn50/backend.h"
#include "rn50/inference.h"
#include "rn50/serve.h"
#include "serve/protocol.h"

namespace rn50::serve {

/// A fixed pool of threads for image decoding, so that at most --decode-threads images are
/// decoded at once however many connections send them.
class DecodePool {
 public:
  /// `threads` workers; 0 = the cores this process may run on.
  explicit DecodePool(int threads);
  ~DecodePool();  ///< finishes the queued tasks, then joins
  /// Runs `task` on a worker; the future rethrows what it threw.
  std::future<void> submit(std::function<void()> task);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

/// One served model.
struct ServedModel {
  std::string name;  ///< the URL's {m}: the model folder's name
  std::string dir;
  InferenceModelInfo info;  ///< class names, preprocessing, exported precision
  std::string arch;
  int64_t num_classes = 0;
  std::string precision;  ///< the engines' precision
  std::string device;     ///< the engines' device ("cpu", "cuda:0")
  std::vector<std::unique_ptr<InferenceEngine>> engines;  ///< one per --instances
  Normalization norm() const;
  int crop() const { return info.crop_size; }
};

/// Loads the models of `opt` (--model folders, else every sub-folder of --model-repository
/// that holds model.json, in name order) with opt.instances engines each on opt.device in
/// opt.precision (empty: the model's). Throws rn50::Error naming the folder or flag: no model
/// given, a folder that is not an rn50 model, two models of one name, a name that is not a
/// URL path segment ([A-Za-z0-9._-]).
std::vector<std::unique_ptr<ServedModel>> load_models(const ServeOptions& opt);

/// Largest image a request may send, in pixels (width x height): 64 megapixels. A larger one
/// (e.g. a header claiming 60000 x 60000) is refused from its header, before any decoding.
inline constexpr int64_t kMaxServedImagePixels = int64_t(1) << 26;

/// The engines' input for request input `in` of model `m`: f32 (N, 3, crop, crop) NCHW.
///   FP32 [N,3,crop,crop]: taken as it is;
///   UINT8 [N,H,W,3]: each image resized and center-cropped (the model's eval transform),
///                    then normalised;
///   BYTES [N]: each file decoded on `pool` (JPEG or PNG, header checked first), then as UINT8.
/// `host` is the oneDNN backend (normalize_u8). Throws HttpError 400 naming the input: a FP32
/// shape of another size than the model's crop, a non-image or truncated file, an image over
/// kMaxServedImagePixels.
Tensor request_images(const RequestInput& in, const ServedModel& m, DecodePool& pool,
                      Backend& host);

/// request_images for one encoded image (the /classify endpoint's body).
Tensor image_file_input(const std::string& bytes, const ServedModel& m, DecodePool& pool,
                        Backend& host);

}  // namespace rn50::serve
