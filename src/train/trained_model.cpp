#include "train/trained_model.h"

#include <filesystem>
#include <map>

#include "model/weights.h"
#include "config/config.h"

namespace rn50 {

InferenceProgram folded_program(Session& s) {
  std::map<std::string, Tensor> sd;
  for (auto& [k, t] : s.model->state_dict()) sd.emplace(k, t);
  const NetworkDesc& d = s.model->desc();
  const double eps = s.model->options().bn_eps;
  InferenceProgram p;
  if (d.input_channels == 3) {
    p = fold_network(d, sd, eps);
  } else {
    // --image-shape 4,H,W: the inference graph takes RGB; dropping the zero channel's weights
    // is exact (model/weights.h, with_input_channels).
    sd["conv1.weight"] = with_input_channels(sd.at("conv1.weight"), 3);
    p = fold_network(describe(d.arch, d.num_classes, 3), sd, eps);
  }
  if (s.cfg.qat) apply_qat_ranges(p, d, sd, "the trained model");
  return p;
}

InferenceModel trained_inference_model(Session& s) {
  InferenceModel m;
  m.program = folded_program(s);
  if (s.cfg.qat) m.info.calibration.method = "qat";
  if (!s.classes.empty()) m.info.classes = class_names_for(s.classes, s.num_classes);
  m.info.resize_short = s.cfg.resize_short;
  m.info.crop_size = s.cfg.crop_size;
  const Normalization norm = normalization(s.cfg);
  m.info.mean.assign(norm.mean.begin(), norm.mean.end());
  m.info.std.assign(norm.std.begin(), norm.std.end());
  return m;
}

void write_inference_dir(Session& s, const std::string& dir) {
  if (s.proc.rank != 0) return;
  const InferenceModel m = trained_inference_model(s);
  save_inference_model(m, dir);
  const bool onnx = onnx_export_available();
  if (onnx) save_onnx_model(m, (std::filesystem::path(dir) / kOnnxFile).string(), s.cfg.qat);
  s.log.out("wrote the inference model to {} (BatchNorm folded; rn50 predict --model, rn50 bench "
            "infer --model){}{}\n",
            dir, onnx ? (s.cfg.qat ? " and a QDQ model.onnx" : " and model.onnx") : "",
            s.cfg.qat ? "; with the QAT ranges: --precision int8 needs no calibration" : "");
}

}  // namespace rn50
