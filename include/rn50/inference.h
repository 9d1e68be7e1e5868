// rn50: inference — the network description (rn50/graph.h) turned into an inference program,
// and the engine that runs it.
//
// The program: every BatchNorm folded into the convolution before it and every ReLU and
// residual add fused into the convolution that produces their input (the post-ops oneDNN and
// cuDNN apply in the convolution's epilogue). The engine, the exporters and INT8 calibration
// walk it; it holds host f32 weights in torchvision's layouts.
//
// Folding (eval-mode BatchNorm, torch.nn.BatchNorm2d: y = gamma (x - mean) / sqrt(var + eps) +
// beta), per output channel k with s = gamma[k] / sqrt(var[k] + eps), computed in double:
//   W'[k, c, r, s] = W[k, c, r, s] * s        b'[k] = beta[k] - mean[k] * s
// as torch.nn.utils.fusion.fuse_conv_bn_weights.
#pragma once

#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rn50/data.h"
#include "rn50/error.h"
#include "rn50/graph.h"
#include "rn50/tensor.h"

namespace rn50 {

/// One operation of the inference program. Values are numbered by the index (in
/// NetworkDesc::layers) of the last layer an op absorbs; value 0 is the network input.
struct InferOp {
  enum class Kind : uint8_t { conv, maxpool, global_avgpool, fc };
  Kind kind = Kind::conv;
  /// conv: the convolution's module name ("conv1", "layer1.0.conv2", "layer2.0.downsample.0");
  /// others: the layer's name ("maxpool", "avgpool", "fc").
  std::string name;
  int input = 0;   ///< value read
  int output = 0;  ///< value written
  /// conv: the value added to the convolution's biased output before the ReLU (the residual
  /// shortcut of a block's last conv: a sum post-op), or -1.
  int residual = -1;
  bool relu = false;  ///< conv: ReLU applied last
  ConvSpec conv;      ///< kind == conv
  PoolSpec pool;      ///< kind == maxpool
  /// conv: f32 (K, C, R, S) OIHW with the BN folded in; fc: f32 (classes, C).
  Tensor weight;
  /// conv: f32 (K), the folded BN shift (0 where no BN follows); fc: f32 (classes).
  Tensor bias;
  /// conv: the BatchNorm folded in ("layer1.0.bn2"), or empty.
  std::string folded_bn;
};

/// The whole program: ops in an order where each op's inputs (and residual) are computed
/// before it. A block's last conv (which adds the shortcut) runs after the shortcut's ops.
struct InferenceProgram {
  std::string arch;
  int num_classes = 0;
  int64_t feature_channels = 0;
  std::vector<InferOp> ops;
  /// For each value (layer index), the index into ops of the op that writes it; -1 for the
  /// input and for layers absorbed into an op (their outputs are never materialised).
  std::vector<int> producer;
  /// Index of the op writing the logits (the fc), always ops.size() - 1.
  int logits_op() const { return static_cast<int>(ops.size()) - 1; }
  /// INT8 ranges: for each value (same indexing as producer), the range of |x| the INT8 engine
  /// quantizes it with: calibrated in the fp32 program (the absolute maximum or a percentile of
  /// |x| over the calibration images; see Calibrator), or learnt by quantization-aware training
  /// (qat_ranges; 0 for the values no quantizer covers). Empty when the program has no ranges;
  /// the INT8 engine needs them.
  std::vector<float> value_absmax;
  /// value_absmax holds ranges learnt by quantization-aware training (`rn50 train --qat`,
  /// apply_qat_ranges): the INT8 engine then quantizes on the grid the network was trained on
  /// (src/core/fake_quant.h): every 8-bit value, u8 ones included, with step absmax / 127 and its
  /// codes clamped to [-127, 127] (u8: [0, 127]). false: post-training calibration's grid, u8
  /// values with step absmax / 255 (codes 0..255), s8 values absmax / 127 (-128..127).
  /// Persisted as model.json's int8_calibration "method": "qat".
  bool qat_ranges = false;
};

/// Builds the program of `desc` with the weights of `state_dict` (host tensors keyed by
/// torchvision names, f32; every parameter and running_mean/running_var of `desc` must be
/// present with its shape). bn_eps: BatchNorm epsilon (torch's 1e-5). Throws rn50::Error naming
/// the key on a missing or misshapen tensor, and naming the layer when the description has a
/// sequence the folder does not know (a BatchNorm not right after a conv, a ReLU or add whose
/// input is not a conv's, a conv/BN output read by more than one layer).
InferenceProgram fold_network(const NetworkDesc& desc,
                              const std::map<std::string, Tensor>& state_dict,
                              double bn_eps = 1e-5);

/// fold_network over a torchvision weights file (safetensors at `path`): `arch` empty = inferred
/// from its keys, `num_classes` 0 = fc.weight's rows. Throws naming the file as
/// load_pretrained_params does, or naming the flag value that matches when fc.weight has another
/// class count.
InferenceProgram fold_weights_file(const std::string& path, const std::string& arch = "",
                                   int num_classes = 0);

/// Whether a state dict holds quantization-aware-training ranges (a key src/model/qat.h's
/// is_qat_key recognises: "<layer>._input_quantizer._amax", "..._state", "..._accum",
/// "<block>.residual_quantizer._amax", ...). fold_network ignores such keys (an fp32 export of
/// QAT weights is the float network; its fake-quant grid is lost).
bool has_qat_ranges(const std::map<std::string, Tensor>& state_dict);

/// Takes the activation ranges a QAT model learnt (the "<quantizer>._amax" entry of each
/// quantizer src/model/qat.h's activation_quantizers(desc) lists) into `program` (folded from the
/// same `desc` and `state_dict`): value_absmax[q.layer] = amax for every quantizer, 0 for the
/// other values, and qat_ranges = true. No calibration: these are the ranges the network was
/// trained to tolerate. `what` names the weights in messages. Throws rn50::Error naming the key
/// when a quantizer's amax is missing, not one f32 value, or not finite and > 0.
void apply_qat_ranges(InferenceProgram& program, const NetworkDesc& desc,
                      const std::map<std::string, Tensor>& state_dict, const std::string& what);

/// How a program's value_absmax was obtained (recorded in model.json for INT8 models).
struct CalibrationInfo {
  /// "max" or "percentile" (post-training calibration), "qat" (the ranges quantization-aware
  /// training learnt, images 0; save_inference_model writes "qat" whenever
  /// program.qat_ranges, and load_inference_model sets qat_ranges from it); empty = none.
  std::string method;
  double percentile = 0;     ///< percentile of |x| (method "percentile"), e.g. 99.99
  int64_t images = 0;        ///< calibration images
  std::string image_root;    ///< where they came from (<root>/train, eval preprocessing)
};

/// What a deployed model needs beside its program: class names and the eval preprocessing.
struct InferenceModelInfo {
  std::vector<std::string> classes;  ///< synsets / names by class index; may be empty
  /// The precision the model was exported for and runs in unless told otherwise: "fp32", or
  /// "int8" (rn50 export --precision int8: the program holds activation ranges). model.json's
  /// "precision"; the weights are stored in f32 either way.
  std::string precision = "fp32";
  int resize_short = 256;            ///< resize the shorter side to this, pixels
  int crop_size = 224;               ///< then center-crop this, pixels
  std::vector<float> mean{0.485f, 0.456f, 0.406f};  ///< ImageNet mean (RGB, of [0, 1] values)
  std::vector<float> std{0.229f, 0.224f, 0.225f};   ///< ImageNet std
  CalibrationInfo calibration;                      ///< INT8 calibration, when present
};

/// An exported inference model: the folded program and its deployment information.
struct InferenceModel {
  InferenceProgram program;
  InferenceModelInfo info;
};

/// The class names of a `num_classes`-way model trained on data with the classes `known`
/// (folder names, in label order): `known`, then "class_<index>" for the outputs no folder
/// names (fine-tuning with --num-of-class above the folder count, e.g. 1000-class weights on a
/// 10-folder set). Throws rn50::Error when `known` has more names than the model has classes.
std::vector<std::string> class_names_for(const std::vector<std::string>& known, int num_classes);

/// Name of the two files of an rn50 inference model folder.
inline constexpr const char* kInferenceWeightsFile = "model.safetensors";
inline constexpr const char* kInferenceJsonFile = "model.json";

/// Writes `model` to folder `dir` (created if needed): model.safetensors holds the folded
/// weights, f32, keyed "<op>.weight" / "<op>.bias" (OIHW convs, (classes, C) fc); model.json
/// holds "format": "rn50-inference", "format_version": 1, the architecture, class count and
/// names, preprocessing and the ops (kind, name, input, output, residual, relu, conv/pool
/// attributes, folded BN). Both files are written atomically. Throws rn50::Error naming the
/// path on an I/O error.
void save_inference_model(const InferenceModel& model, const std::string& dir);

/// Reads a folder written by save_inference_model. Throws rn50::Error naming the file and the
/// entry when a file is missing or unreadable, the format or version is not this one, an op is
/// malformed (unknown kind, a value read before it is written) or a tensor is missing or of the
/// wrong shape.
InferenceModel load_inference_model(const std::string& dir);

/// Whether this build writes ONNX (CMake found Debian's libonnx-dev and libprotobuf-dev).
bool onnx_export_available();

/// Name of the ONNX file `rn50 export --format onnx` writes in its output folder.
inline constexpr const char* kOnnxFile = "model.onnx";

/// Writes `model` to `path` as ONNX, written atomically: ir_version 7, opset 13; graph input
/// "input" float32 NCHW ["batch", 3, crop_size, crop_size] (dynamic batch), output "logits"
/// float32 ["batch", classes]; nodes Conv (BN folded: weight and bias initializers), Add (the
/// residual), Relu, MaxPool, GlobalAveragePool, Flatten and Gemm (transB=1); metadata_props
/// "arch", "num_classes", "classes" (a JSON array), "mean", "std" (comma lists), "resize_short",
/// "crop_size", "precision" ("fp32" or "int8"). The model passes onnx::checker before it is
/// written. The input is expected normalised as in training (rn50 does not put the
/// normalisation into the graph, as DLE's exports). Throws rn50::Error naming the path when the
/// checker refuses the model, on an I/O error, or when this build has no ONNX support
/// (onnx_export_available() is false).
///
/// int8 = true (needs program.value_absmax): a QDQ model (TensorRT's explicit-quantization form, as
/// pytorch-quantization exports QAT ResNets) quantizing what the INT8 engine quantizes. Every value
/// the engine stores in 8 bits (each output of a conv but, with calibrated ranges, the stem, and
/// the maxpool output the convs read) goes through QuantizeLinear -> DequantizeLinear right after
/// it is computed, and every reader (the next convs, the residual Add, the average pool) reads the
/// DequantizeLinear output; per tensor, int8 with zero point 0 and scale absmax / 127 (TensorRT
/// takes int8 only). For QAT ranges (qat_ranges) that is exactly the grid the network trained on
/// and the INT8 engine runs; for calibrated ranges the engine stores the ReLU outputs as u8 with
/// step absmax / 255, so the ONNX is one bit coarser there. Each of those convs reads its weight as
/// an int8 initializer "<conv>.weight_quantized" through DequantizeLinear with per-output-channel
/// scales "<conv>.weight_scale" (axis 0, max |W_k| / 127 of the folded weight,
/// quant::weight_scales; codes rounded to nearest even as the engine's) and int8 zero points; the
/// bias stays float. For calibrated ranges the stem conv, the average pool and the fc stay float,
/// as in the engine. For QAT ranges, as the engine runs them on the trained grid, the network input
/// and the fc's input (the pooled features) go through QuantizeLinear -> DequantizeLinear too and
/// the stem conv and the fc read int8 weights in the same way; the average pool stays float.
/// metadata_props "int8": a description; "calibration": model.info.calibration.method ("qat" for
/// QAT ranges).
void save_onnx_model(const InferenceModel& model, const std::string& path, bool int8 = false);

/// `rn50 export`: fold a trained model and write it for inference.
struct ExportConfig {
  /// Weights with torchvision keys: --from-pretrained-params, or the model.safetensors of the
  /// checkpoint folder --from-checkpoint names (the CLI resolves it).
  std::string weights;
  std::string arch;                  ///< --arch; empty = inferred from the weights' keys
  int num_classes = 0;               ///< --num-of-class; 0 = fc.weight's rows
  std::vector<std::string> classes;  ///< class names (a checkpoint's state.json), may be empty
  int resize_short = 256;            ///< --resize-short, recorded as preprocessing
  int crop_size = 224;               ///< --crop-size, recorded as preprocessing
  /// The input normalisation the model was trained with (a checkpoint's --normalize-mean /
  /// --normalize-std), recorded as preprocessing and used for int8 calibration.
  Normalization norm;
  std::string output;                ///< --output DIR
  /// --format: "rn50" (model.json + model.safetensors) and/or "onnx" (model.onnx).
  std::vector<std::string> formats{"rn50"};
  /// --precision: fp32, or int8: the model then holds the activation ranges the INT8 engine
  /// needs (its weights stay f32 and are quantized when the engine loads them). Weights with
  /// QAT ranges (has_qat_ranges: trained with --qat) give their learnt ranges (apply_qat_ranges;
  /// calibration method "qat"); other weights are calibrated on --image-root's images.
  /// int8 with format "onnx" writes a QDQ ONNX (save_onnx_model with int8).
  std::string precision = "fp32";
  std::string calib_root;        ///< --image-root: calibration images come from <root>/train
  int calib_images = 500;        ///< --calib-images
  std::string calib_method = "percentile";  ///< --calib-method max|percentile
  double calib_percentile = 99.99;          ///< --calib-percentile (method percentile)
  /// The calibration flags given on the command line ("--image-root", "--calib-images", ...;
  /// the CLI fills it; calib_root set counts as --image-root): refused with QAT weights, whose
  /// ranges need no calibration.
  std::vector<std::string> calib_flags;
};

/// Runs the export and prints one summary line to `out` (and, for int8 from QAT weights, one
/// line before it saying whose QAT ranges were used). Throws rn50::Error naming the flag or
/// file on a bad value, an unreadable weights file, calibration flags with QAT weights, or a
/// format/precision not built yet.
void run_export(const ExportConfig& cfg, std::ostream& out);

/// The CPU engine's layout of its f32 activations between primitives (EngineOptions).
///  * automatic: blocked (on CPUs without AVX-512 oneDNN's jit:avx2 convolutions run 15-45%
///    faster on it than on NHWC at ResNet-50's shapes; with AVX-512 its Winograd convs need no
///    reorders on it, 5% at batch 32; src/backend/cpu/conv_algo.h);
///  * nhwc: NHWC (N, H, W, C);
///  * blocked: oneDNN's nChw16c on CPUs with AVX-512, nChw8c without (N, C/16, H, W, 16:
///    channels in blocks of 16, or of 8; a value whose channel count is not a multiple of the
///    block stays NHWC, the input image NCHW).
/// bf16 and int8 engines and a calibrating engine always keep NHWC.
enum class CpuActivationLayout { automatic, nhwc, blocked };

/// Options of an inference engine.
struct EngineOptions {
  /// "cpu" (the oneDNN engine); "cuda" / "cuda:N" / "auto" (--device: the GPU engine, every
  /// conv one cudnnConvolutionBiasActivationForward with the folded bias, residual and ReLU
  /// fused, NHWC, weights KRSC, one CUDA graph per batch size; precisions fp32 (IEEE f32
  /// math), tf32, fp16, bf16; int8 is refused there); "ref" (the same engine on the reference
  /// backend, for tests: fp32, fp16, bf16).
  std::string device = "cpu";
  /// "" = fp32, or, where a command runs an exported model (bench infer, predict --model), the
  /// precision the model was exported for (InferenceModelInfo::precision);
  /// "fp32"; "bf16" (activations and conv/fc weights bf16; bias, accumulation and logits f32;
  /// oneDNN emulates it on CPUs without AVX-512-BF16); or "int8" (needs a program with ranges,
  /// value_absmax): every convolution but the stem in INT8 as oneDNN's INT8 inference example
  /// (cnn_inference_int8.cpp): s8 weights with per-output-channel scales max|W_k| / 127,
  /// activations u8 (values after a ReLU) or s8 (the downsample convs' outputs) with per-tensor
  /// scales absmax / 255 or absmax / 127, s32 accumulation, the folded bias, residual sum and
  /// ReLU applied in f32 in the epilogue, rounding to nearest even with saturation. The stem conv
  /// (3 input channels, 3% of the FLOPs), its max pool, the global average pool and the fc stay
  /// float: the stem, max pool and fc in bf16 where the CPU has native bf16 (AVX-512 BF16 or
  /// AMX; the stem's output is then quantized to u8, the pooled features rounded once for the
  /// fc; onednn::infer_int8_float_ops_bf16), else f32; the average pool in f32.
  /// Ranges learnt by QAT (InferenceProgram::qat_ranges): the training grid instead, u8 values
  /// with scale absmax / 127 too, every 8-bit value's codes clamped to [-127, 127] (a clip
  /// post-op in place of the ReLU; the maxpool output is quantized through s8, which saturates
  /// at 127), and as in training the stem conv reads the input quantized on its learnt grid (in
  /// INT8, or in f32 on the grid where oneDNN would halve an s8-source conv's weights) and the
  /// fc reads its input on its grid with its weights fake-quantized per output channel, in f32.
  std::string precision;
  /// Profiling (rn50/profile.h): the device engine runs its ops through the profiling backend
  /// (each op timed and synchronised, no CUDA graph) so that an active OpProfiler sees them.
  /// The CPU engine needs no option: it times its primitives whenever an OpProfiler is active
  /// on the calling thread.
  bool profile = false;
  /// Every image's logits independent of the batch it runs in, bit for bit. The CPU engine then
  /// runs its 3x3 convolutions direct, not Winograd (src/backend/cpu/conv_algo.h), whose
  /// blocking and so rounding follow the batch size, and its fc as one 1-row product per image
  /// (oneDNN's GEMM picks its kernel by the number of rows). `rn50 serve` sets it, so that
  /// dynamic batching never changes an answer. The GPU engine ignores it.
  bool batch_invariant = false;
  /// The CPU engine's f32 activation layout (CpuActivationLayout; tests force either). The GPU
  /// engine ignores it.
  CpuActivationLayout cpu_activations = CpuActivationLayout::automatic;
};

/// Runs an InferenceProgram forward only: weights pre-packed once in the layout the backend
/// prefers, activations NHWC (the CPU engine's f32 ones blocked where that is faster:
/// CpuActivationLayout), no gradient or BatchNorm-statistics buffers. Primitives and
/// activation buffers are built on the first call for an input shape and reused by later calls
/// with that shape.
///
/// Threads: one engine may be shared; concurrent run() calls are serialised by an internal
/// mutex (each call uses every core through oneDNN's OpenMP threads). For calls that overlap,
/// create one engine per thread.
/// The GPU engine (device "cuda") keeps the same contract: one engine may be shared, run()
/// calls are serialised; its weights, buffers and graphs live on the GPU.
class InferenceEngine {
 public:
  virtual ~InferenceEngine() = default;
  /// Logits, f32 host (N, classes), of `x`: host f32 (N, 3, H, W) in Layout::NCHW or NHWC,
  /// normalised as in training (ImageNet mean/std). Throws rn50::Error naming the shape when x
  /// is not such a tensor or is too small for the network.
  virtual Tensor run(const Tensor& x) = 0;
  /// Engines on a device (CUDA): keeps a device copy of `x` (what run() takes) for
  /// run_device_resident() and returns true; host engines return false (the input is already
  /// where they compute). Throws as run() does on a bad `x`.
  virtual bool stage_on_device(const Tensor& x) { return false; }
  /// Runs the batch stage_on_device() kept, as a framework benchmark runs a tensor already on
  /// the device (the torch peer's `m(x)`): the device-side conversion into the engine's
  /// compute dtype and layout, the network, and a wait for the logits, which stay on the device
  /// (nothing crosses PCIe). Throws rn50::Error when nothing was staged.
  virtual void run_device_resident();
  virtual int num_classes() const = 0;
  virtual const std::string& precision() const = 0;
  virtual const InferenceProgram& program() const = 0;
};

/// An engine for `program` on opt.device in opt.precision. Throws rn50::Error naming the device
/// or precision when no engine exists for it, and for int8 when the program is not calibrated.
std::unique_ptr<InferenceEngine> make_inference_engine(InferenceProgram program,
                                                       const EngineOptions& opt = {});

/// Options of INT8 post-training calibration.
struct CalibrationConfig {
  std::string method = "percentile";  ///< "max": max |x|; "percentile": that percentile of |x|
  double percentile = 99.99;          ///< of all |x| of a value over the calibration images
};

/// Post-training calibration: runs the fp32 CPU engine on calibration batches and records, for
/// every value of the program, the range of |x| the INT8 engine quantizes with. "max" takes the
/// absolute maximum; "percentile" the given percentile of |x| over every element of the value
/// in every image (TensorRT's / pytorch-quantization's percentile calibrator), from a
/// 2048-bin histogram of |x| per value whose range doubles (bins merged in pairs) when a larger
/// value arrives, read at the bin's upper edge. Deterministic: the same batches in the same
/// order give the same ranges. Throws rn50::Error on a bad method or percentile.
class Calibrator {
 public:
  Calibrator(const InferenceProgram& program, const CalibrationConfig& cfg);
  ~Calibrator();
  /// Runs one batch: host f32 (N, 3, H, W), NCHW or NHWC, normalised.
  void add(const Tensor& images);
  /// The ranges so far, indexed by value (0 for values never written, such as absorbed layers).
  /// Throws rn50::Error when no batch was added.
  std::vector<float> value_absmax() const;
  int64_t images() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Calibration images: `count` files of <image_root>/train taken at evenly spaced positions of
/// the sorted ImageFolder index (every class represented, no randomness), decoded with the eval
/// transform (resize_short, center crop) and normalised with `norm` (Backend::normalize_u8),
/// handed to `consume` in f32 NCHW batches of at most `batch` images. Unreadable files are
/// skipped and counted (returned). Throws rn50::Error naming the folder when it has no images.
int64_t for_calibration_batches(const std::string& image_root, int count, int resize_short,
                                int crop, int batch,
                                const std::function<void(const Tensor&)>& consume,
                                const Normalization& norm = {});

/// `rn50 bench infer`: inference throughput and latency per batch size (DLE's inference
/// benchmark: images/s and latency average, p90, p95, p99).
struct InferBenchConfig {
  std::string arch = "resnet50";  ///< --arch
  int num_classes = 1000;         ///< --num-of-class (0 with weights: from fc.weight)
  /// --from-pretrained-params: safetensors weights (torchvision keys); empty = Kaiming-initialised
  /// weights (--seed), which time the same.
  std::string weights;
  /// --model: an rn50 inference model folder (rn50 export); overrides arch/weights.
  std::string model_dir;
  uint64_t seed = 0;
  std::vector<int> batch_sizes{1, 32};  ///< --batch-sizes
  int crop_size = 224;                  ///< --crop-size: input H = W, pixels
  int steps = 20;                       ///< --benchmark-steps: timed calls per batch size
  int warmup_steps = 3;                 ///< --benchmark-warmup-steps: untimed calls before
  EngineOptions engine;                 ///< --device, --precision
  std::string report_file;              ///< --report-file: appends one line per batch size
  /// --report-format: "rn50" (JSON lines, docs/report-schema.md) or "dllogger" (DLLL lines).
  std::string report_format = "rn50";
  /// --data: "synthetic" (random normalised input) or an ImageFolder root, whose val/ split is
  /// first classified in full (top-1/top-5, an infer_accuracy report line) with the eval
  /// transform at the model's resize/crop (--resize-short, else 256 * crop / 224), and after the
  /// model-alone timing timed again with data loading (time_engine_with_loader).
  std::string data = "synthetic";
  int resize_short = 0;          ///< --resize-short; 0 = the model's, else crop * 256 / 224
  std::string predictions_file;  ///< --predictions-file: "path<TAB>label<TAB>top1" per image
  bool exact_decode = false;     ///< --exact-decode: PIL's pixels bit for bit (LoaderOptions)
  /// --profile: after each batch size's timed calls, as many profiled calls (every op timed,
  /// rn50/profile.h): a per-op table and a "profile" record. The timed calls stay unprofiled.
  bool profile = false;
  /// --peak-file: "peak" records (rn50 bench peak) to state each result's share of the peak of
  /// its precision (rn50/roofline.h); empty = none.
  std::string peak_file;
  /// --include-upload: on a device, time run() with the host input's upload and the logits'
  /// copy back; default false: the input stays on the device between calls, as the torch peer
  /// times it (InferenceEngine::run_device_resident). Every result says which ("input").
  bool include_upload = false;
  /// --data-layout: the layout of the f32 input batch handed to the engine, NHWC (default) or
  /// NCHW (DLE inference.py's --data-layout); the engine converts it into its own at the call.
  Layout input_layout = Layout::NHWC;
};

/// Accuracy of an engine over an ImageFolder val split.
struct InferAccuracy {
  int64_t images = 0;
  double top1 = 0, top5 = 0;  ///< percent
};

/// Classifies every image of <image_root>/val (eval transform: resize_short, center crop;
/// normalised with `norm`; exact_decode as LoaderOptions) in batches of `batch` with `engine`;
/// writes one "path<TAB>label<TAB>top1" line per image to `predictions_file` when it is not
/// empty (atomically). Throws rn50::Error naming the folder when it holds no images, or the file
/// on an I/O error.
InferAccuracy measure_accuracy(InferenceEngine& engine, const std::string& image_root,
                               int resize_short, int crop, int batch,
                               const std::string& predictions_file = "",
                               bool exact_decode = false, const Normalization& norm = {});

/// One batch size's figures. Latencies are wall milliseconds of one run() call on a batch
/// (input already in memory, logits back on the host); percentiles interpolate linearly between
/// the sorted samples (numpy.percentile's default, as DLE's scripts).
struct InferBenchPoint {
  int batch_size = 0;
  int steps = 0;
  double ips = 0;  ///< images/s over the timed calls
  double latency_avg_ms = 0, latency_p50_ms = 0, latency_p90_ms = 0, latency_p95_ms = 0,
         latency_p99_ms = 0;
  /// With data loading (time_engine_with_loader): mean seconds per batch spent waiting for the
  /// loader (DLE's data_time), and that wait's share of the latency (0..1); else 0.
  double data_time = 0, data_share = 0;
};

/// Runs the benchmark, printing a table row per batch size to `out` as it goes. Throws
/// rn50::Error naming the flag for a bad value (batch size < 1, steps < 1, ...).
std::vector<InferBenchPoint> bench_infer(const InferBenchConfig& cfg, std::ostream& out);

class ReportWriter;

/// Times `engine` as bench_infer does, for cfg.batch_sizes, cfg.crop_size, cfg.steps and
/// cfg.warmup_steps (cfg's model fields are not used; `arch` and `classes` label the output).
/// Prints the table to `out` and writes an infer_benchmark line per batch size to `report`
/// when it is not null.
std::vector<InferBenchPoint> time_engine(InferenceEngine& engine, const InferBenchConfig& cfg,
                                         const std::string& arch, int classes, std::ostream& out,
                                         ReportWriter* report);

/// Times the whole path of real images for each of cfg.batch_sizes, as DLE's inference tables
/// measure "with data loading" (DLE PaddlePaddle RN50v1.5 inference.py benchmark_dataset): per
/// batch, the wait for the next full batch of source_for(batch) (decoded, resized and cropped to
/// cfg.crop_size on the loader's threads; an epoch's partial last batch is skipped and the
/// source restarts), the normalisation with `norm` into an f32 batch of cfg.input_layout, and
/// engine.run; cfg.warmup_steps untimed batches, then cfg.steps timed ones. Prints a table
/// (img/s, latency avg and p50/p90/p95/p99 in ms, the loader's ms per batch and its share) to
/// `out` and writes an infer_benchmark line per batch size (input "loader", data_time in
/// seconds, data_share, image_root = `what`) to `report` when not null. source_for must give a
/// source of that batch size, alive until the next call. Throws rn50::Error naming `what` when
/// an epoch holds no full batch, or as the loader and the engine do.
std::vector<InferBenchPoint> time_engine_with_loader(
    InferenceEngine& engine, const InferBenchConfig& cfg, const std::string& arch, int classes,
    const std::function<DataSource&(int batch)>& source_for, const Normalization& norm,
    const std::string& what, std::ostream& out, ReportWriter* report);

}  // namespace rn50
