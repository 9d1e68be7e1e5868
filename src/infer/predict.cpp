// rn50 predict: classify image files with weights from a safetensors file (torchvision keys).
// Per image: decode (PIL-exact, data/decode.h) -> Resize(resize_short) + CenterCrop(crop)
// (torchvision eval transform, data/transforms.h) -> normalize_u8 (ImageNet mean/std) on the
// host -> the inference engine on --device (rn50/inference.h: oneDNN on the CPU, the GPU engine
// on CUDA) -> softmax in fp32 on the host -> top-k (ties: lower index).
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "core/check.h"
#include "core/fileio.h"
#include "data/decode.h"
#include "data/transforms.h"
#include "model/input_stage.h"
#include "model/logits.h"
#include "rn50/backend.h"
#include "rn50/data.h"
#include "rn50/predict.h"
#include "rn50/inference.h"
#include "rn50/model.h"

namespace rn50 {
namespace {

namespace fs = std::filesystem;

struct ClassName {
  std::string synset, name;
};

/// Reads "index<TAB>synset<TAB>name" lines; a first line whose index is not a number is a header.
std::map<int64_t, ClassName> read_classes_tsv(const std::string& path) {
  std::ifstream f(path);
  RN50_CHECK(f.good(), "--classes '{}': cannot open", path);
  std::map<int64_t, ClassName> out;
  std::string line;
  int lineno = 0;
  while (std::getline(f, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> cols;
    std::stringstream ss(line);
    std::string col;
    while (std::getline(ss, col, '\t')) cols.push_back(col);
    const bool numeric = !cols.empty() && !cols[0].empty() &&
                         cols[0].find_first_not_of("0123456789") == std::string::npos;
    if (!numeric) {
      RN50_CHECK(lineno == 1, "--classes '{}' line {}: expected index<TAB>synset<TAB>name", path,
                 lineno);
      continue;  // header
    }
    RN50_CHECK(cols.size() >= 2, "--classes '{}' line {}: expected index<TAB>synset<TAB>name", path,
               lineno);
    out[std::stoll(cols[0])] = {cols[1], cols.size() >= 3 ? cols[2] : cols[1]};
  }
  return out;
}

}  // namespace

int run_predict(const PredictConfig& cfg, std::ostream& out, std::ostream& err) {
  int failed = 0;
  try {
    RN50_CHECK(!cfg.images.empty(),
               "no image files given: rn50 predict --model DIR | --from-pretrained-params FILE "
               "IMAGE...");
    RN50_CHECK(cfg.weights.empty() != cfg.model_dir.empty(),
               "pass one of --from-pretrained-params FILE and --model DIR");
    RN50_CHECK(cfg.crop_size >= 0, "--crop-size {}: must be >= 1 (0: the model's or 224)",
               cfg.crop_size);
    RN50_CHECK(cfg.resize_short >= 0, "--resize-short {}: must be >= 1 (0: the model's or 256)",
               cfg.resize_short);
    RN50_CHECK(cfg.top_k >= 1, "--top-k {}: must be >= 1", cfg.top_k);
    RN50_CHECK(cfg.num_classes >= 0, "--num-of-class {}: must be >= 0", cfg.num_classes);
    // The inference engine on --device (the oneDNN engine on the CPU, the GPU engine on
    // CUDA: BN folded, fused epilogues, no training buffers); images are normalised on the host.
    EngineOptions eo;
    eo.device = cfg.device;
    eo.precision = cfg.precision;
    auto backend = make_backend("onednn");
    ModelOptions mo;
    mo.layout = Layout::NHWC;

    std::unique_ptr<InferenceEngine> engine;
    int num_classes = cfg.num_classes;
    int resize_short = cfg.resize_short > 0 ? cfg.resize_short : 256;
    int crop_size = cfg.crop_size > 0 ? cfg.crop_size : 224;
    std::vector<std::string> model_classes;  // from a checkpoint's state.json or model.json
    if (!cfg.model_dir.empty()) {
      RN50_CHECK(cfg.arch.empty() && cfg.num_classes == 0,
                 "--arch / --num-of-class: the model folder '{}' fixes them; drop the flags",
                 cfg.model_dir);
      InferenceModel m = load_inference_model(cfg.model_dir);
      const std::vector<float> mean(kImageNetMean.begin(), kImageNetMean.end()),
          std(kImageNetStd.begin(), kImageNetStd.end());
      RN50_CHECK(m.info.mean == mean && m.info.std == std,
                 "'{}': the model normalises with another mean/std than ImageNet's, which rn50 "
                 "predict does not support yet",
                 cfg.model_dir);
      num_classes = m.program.num_classes;
      if (cfg.resize_short == 0) resize_short = m.info.resize_short;
      if (cfg.crop_size == 0) crop_size = m.info.crop_size;
      model_classes = m.info.classes;
      if (eo.precision.empty()) eo.precision = m.info.precision;  // as exported
      engine = make_inference_engine(std::move(m.program), eo);
    } else {
      InferenceProgram p = fold_weights_file(cfg.weights, cfg.arch, cfg.num_classes);
      num_classes = p.num_classes;
      engine = make_inference_engine(std::move(p), eo);
    }
    if (!cfg.weights.empty()) {
      // Weights inside an rn50 checkpoint folder: take the class list from its state.json.
      const fs::path state = fs::path(cfg.weights).parent_path() / "state.json";
      if (fs::exists(state)) {
        try {
          auto j = nlohmann::json::parse(read_file(state.string()));
          model_classes = j.value("classes", std::vector<std::string>{});
        } catch (const std::exception&) {
          // not an rn50 state file: indices only
        }
      }
    }
    const int top = std::min(cfg.top_k, num_classes);
    std::map<int64_t, ClassName> names;
    if (!cfg.classes_tsv.empty()) {
      names = read_classes_tsv(cfg.classes_tsv);
    } else {
      for (size_t i = 0; i < model_classes.size(); ++i)
        names[static_cast<int64_t>(i)] = ClassName{model_classes[i], ""};
    }

    InputStage input(*backend, mo.layout, mo.compute_dtype, num_classes, 1);
    Batch b;
    b.images = Tensor::empty({1, 3, crop_size, crop_size}, DType::u8, Layout::NHWC);
    b.labels = Tensor::zeros({1}, DType::i32);
    b.size = 1;
    Tensor host_logits = Tensor::empty({1, num_classes}, DType::f32);
    std::vector<float> probs(static_cast<size_t>(num_classes));

    for (const std::string& path : cfg.images) {
      try {
        Image img = data::decode_image_file(path);
        data::eval_transform(img, resize_short, crop_size, b.images.data_as<uint8_t>());
      } catch (const std::exception& e) {
        ++failed;
        err << "error: cannot read image '" << path << "': " << e.what() << "\n";
        err.flush();
        continue;
      }
      input.load(b);
      host_logits = engine->run(input.x());
      softmax_row(host_logits.data_as<float>(), num_classes, probs.data());
      std::vector<int64_t> idx = topk_indices(probs.data(), num_classes, top);
      auto label = [&](int64_t i) -> std::pair<std::string, std::string> {
        auto it = names.find(i);
        if (it == names.end()) return {"", ""};
        return {it->second.synset, it->second.name};
      };
      if (cfg.json) {
        nlohmann::ordered_json j;
        j["file"] = path;
        nlohmann::ordered_json arr = nlohmann::ordered_json::array();
        for (int64_t i : idx) {
          auto [synset, name] = label(i);
          nlohmann::ordered_json e;
          e["index"] = i;
          e["name"] = !name.empty() ? name : !synset.empty() ? synset : std::to_string(i);
          if (!synset.empty()) e["synset"] = synset;
          e["prob"] = static_cast<double>(probs[static_cast<size_t>(i)]);
          arr.push_back(e);
        }
        j[fmt::format("top{}", cfg.top_k == 5 ? 5 : top)] = arr;
        out << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
      } else {
        out << path << "\n";
        int r = 0;
        for (int64_t i : idx) {
          auto [synset, name] = label(i);
          std::string label_text = synset;
          if (!name.empty()) label_text += (label_text.empty() ? "" : "  ") + name;
          out << fmt::format("  {}. {:.6f}  {:4d}  {}\n", ++r, probs[static_cast<size_t>(i)], i,
                             label_text);
        }
      }
      out.flush();
    }
  } catch (const std::exception& e) {
    out.flush();
    err << "error: " << error_text(e) << "\n";
    return 1;
  }
  return failed ? 1 : 0;
}

}  // namespace rn50
