#include "core/report.h"

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/check.h"
#include "core/dllogger.h"

namespace rn50 {
namespace {

using json = nlohmann::ordered_json;
using T = FieldType;

ReportField req(std::string name, FieldType t, std::string doc) {
  return {std::move(name), t, true, false, std::move(doc)};
}
ReportField opt(std::string name, FieldType t, std::string doc) {
  return {std::move(name), t, false, false, std::move(doc)};
}

/// The fields every AMP line with loss scaling adds.
void add_loss_scale(std::vector<ReportField>& f) {
  f.push_back(opt("train.loss_scale", T::number,
                  "current loss scale; with fp16 --amp and loss scaling only"));
  f.push_back(opt("train.skipped_steps", T::integer,
                  "steps skipped so far for inf/NaN gradients; with fp16 --amp only"));
}

/// The roofline fields of a benchmark record (rn50/roofline.h); `what` says what one image's
/// GFLOP count covers.
void add_roofline(std::vector<ReportField>& f, const std::string& what) {
  f.push_back(opt("gflops_per_image", T::number,
                  "GFLOP of one image: " + what +
                      " (2 x the multiply-adds of the convolutions and the fc, forward_flops in "
                      "rn50/graph.h; BN, ReLU, add and pooling not counted); reports before the "
                      "roofline lack it"));
  f.push_back(opt("achieved_gflops", T::number,
                  "GFLOP/s achieved: images/s x gflops_per_image; with gflops_per_image"));
  f.push_back(opt("peak_gflops", T::number,
                  "the measured peak of this precision (rn50 bench peak: the better of oneDNN's "
                  "matmul and 3x3 conv, GOP/s for int8); with --peak-file holding one"));
  f.push_back(opt("peak_op", T::string, "which op gave peak_gflops: matmul or conv3x3; with it"));
  f.push_back(opt("peak_share", T::number,
                  "achieved_gflops / peak_gflops, 0-1 (the share of the machine's own limit); "
                  "with peak_gflops"));
}

/// The validation metrics of an evaluation pass; required or not.
void add_val(std::vector<ReportField>& f, bool required, const std::string& when) {
  auto add = [&](std::string name, FieldType t, std::string doc) {
    f.push_back(required ? req(std::move(name), t, std::move(doc))
                         : opt(std::move(name), t, doc + when));
  };
  add("val.loss", T::number, "mean label-smoothed cross-entropy over the val images");
  add("val.top1", T::number, "top-1 accuracy, percent");
  add("val.top5", T::number, "top-5 accuracy, percent");
  add("val.ips", T::number, "evaluation images/s (all ranks)");
  add("val.images", T::integer, "images evaluated (every val image once, all ranks)");
  add("val.bad_samples", T::integer, "undecodable val images skipped");
  // Timings of the pass (DLE's val.* timings); optional: reports before rn50 0.1.0's session
  // redesign lack them.
  f.push_back(opt("val.data_time", T::number,
                  "mean seconds per val batch waiting for data (rank 0)" + when));
  f.push_back(opt("val.compute_time", T::number,
                  "mean seconds per val batch in the rest: upload, forward, loss (rank 0, host's "
                  "view)" + when));
  f.push_back(opt("val.batch_time", T::number, "mean wall seconds per val batch (rank 0)" + when));
}

std::vector<ReportRecordType> make_schema() {
  std::vector<ReportRecordType> s;

  ReportRecordType config{
      "config", "as the first line of every `rn50 train` / `rn50 eval` report", {}, true};
  auto& c = config.fields;
  c.push_back(req("world_size", T::integer, "processes in the job"));
  c.push_back(req("version", T::string, "rn50 version"));
  c.push_back(req("num_of_class", T::integer,
                  "classes of the model, resolved (the flag's 0 = from the dataset)"));
  c.push_back(req("classes", T::integer, "class folders found in the dataset (0: synthetic)"));
  c.push_back(req("global_batch_size", T::integer, "--batch-size x world size"));
  c.push_back(req("rank", T::integer, "rank that wrote the report (always 0)"));
  c.push_back(req("launcher", T::string, "how the processes were started: none, mpi, slurm"));
  c.push_back(req("communicator", T::string, "gradient/metric communicator: single, mpi, nccl"));
  c.push_back(req("base_lr", T::number, "peak learning rate after scaling by the global batch"));
  c.push_back(req("steps_per_epoch", T::integer, "optimiser steps per epoch (0: eval only)"));
  c.push_back(req("backend", T::string, "ops backend: ref, onednn, cuda"));
  c.push_back(req("resolved_device", T::string, "device used, e.g. \"cpu\" or \"cuda:0\""));
  c.push_back(opt("precision", T::string,
                  "the run's precision: fp32, tf32, amp_fp16, amp_bf16 or pure_fp16 (older "
                  "reports lack it)"));
  c.push_back(req("compute_dtype", T::string, "dtype of convolutions/GEMMs: f32, f16, bf16"));
  c.push_back(req("train.samples", T::integer, "training images (0: eval only)"));
  c.push_back(req("val.samples", T::integer, "validation images (0: none)"));
  c.push_back(req("params", T::integer, "trainable parameters"));
  c.push_back(opt("resumed_from", T::string, "checkpoint folder; with --from-checkpoint only"));
  c.push_back(opt("start_epoch", T::integer, "first epoch to run; with --from-checkpoint only"));
  c.push_back(opt("start_step", T::integer, "global step resumed at; with --from-checkpoint only"));
  s.push_back(std::move(config));

  ReportRecordType step{"step", "every --print-interval steps of training", {}, false};
  auto& st = step.fields;
  st.push_back(req("epoch", T::integer, "epoch, 0-based"));
  st.push_back(req("step", T::integer, "optimiser steps done, whole run"));
  st.push_back(req("iteration", T::integer,
                   "optimiser steps done in this epoch (DLLogger's step [epoch, iteration])"));
  st.push_back(req("train.loss", T::number, "loss of this step"));
  st.push_back(req("train.loss_avg", T::number, "mean loss since the previous step line"));
  st.push_back(req("train.lr", T::number, "learning rate of this step"));
  st.push_back(req("train.ips", T::number, "training images/s, all ranks"));
  // DLE's per-step timings; optional: older reports lack them.
  st.push_back(opt("train.batch_time", T::number,
                   "mean wall seconds per step since the previous step line (rank 0)"));
  st.push_back(opt("train.data_time", T::number,
                   "mean seconds per step waiting for data since the previous step line"));
  st.push_back(opt("train.compute_time", T::number,
                   "mean seconds per step in the rest since the previous step line"));
  add_loss_scale(st);
  s.push_back(std::move(step));

  ReportRecordType epoch{"epoch", "at the end of every training epoch", {}, false};
  auto& e = epoch.fields;
  e.push_back(req("epoch", T::integer, "epoch, 0-based"));
  e.push_back(req("step", T::integer, "optimiser steps done, whole run"));
  e.push_back(req("train.loss", T::number, "mean training loss of the epoch"));
  e.push_back(req("train.top1", T::number, "training top-1, percent (augmented images)"));
  e.push_back(req("train.top5", T::number, "training top-5, percent"));
  e.push_back(req("train.lr", T::number, "learning rate of the epoch's last step"));
  e.push_back(req("train.ips", T::number, "images/s, all ranks (first step of the run excluded)"));
  e.push_back(req("train.data_time", T::number, "mean seconds per step waiting for data"));
  e.push_back(req("train.compute_time", T::number, "mean seconds per step computing"));
  e.push_back(req("train.bad_samples", T::integer, "undecodable training images skipped so far"));
  add_loss_scale(e);
  add_val(e, false, "; when the epoch was evaluated");
  s.push_back(std::move(epoch));

  ReportRecordType eval{"eval", "once by `rn50 eval` (--run-scope eval_only)", {}, false};
  eval.fields.push_back({"epoch", T::integer, true, true,
                         "epoch of the loaded checkpoint; null for --from-pretrained-params or "
                         "random weights"});
  add_val(eval.fields, true, "");
  s.push_back(std::move(eval));

  ReportRecordType bench{"benchmark", "once at the end of `rn50 train --benchmark`", {}, false};
  auto& b = bench.fields;
  b.push_back(req("train.ips", T::number, "images/s of the whole job over the measured steps"));
  b.push_back(req("train.ips_per_rank", T::number, "images/s of rank 0"));
  b.push_back(req("world_size", T::integer, "processes in the job"));
  b.push_back(req("train.data_time", T::number, "mean seconds per measured step waiting for data"));
  b.push_back(req("train.compute_time", T::number, "mean seconds per measured step computing"));
  b.push_back(req("train.loss", T::number, "loss of the last step"));
  b.push_back(opt("allreduce_seconds_per_step", T::number,
                  "the gradient allreduce timed on its own; with several processes"));
  b.push_back(opt("buckets", T::integer, "gradient allreduce buckets; with several processes"));
  b.push_back(opt("allreduce_exposed_seconds_per_step", T::number,
                  "allreduce time left after backward; MPI communicator only"));
  b.push_back(opt("allreduce_hidden_share", T::number,
                  "share of the allreduce hidden under backward, 0-1; MPI communicator only"));
  b.push_back(req("steps", T::integer, "measured steps (--benchmark-steps)"));
  b.push_back(req("warmup_steps", T::integer, "untimed steps before (--benchmark-warmup-steps)"));
  b.push_back(req("batch_size", T::integer, "images per step per process"));
  b.push_back(req("images", T::integer, "images in the measured steps, rank 0"));
  b.push_back(req("seconds", T::number, "wall seconds of the measured steps"));
  b.push_back(req("arch", T::string, "model: resnet50, resnet18, ..."));
  b.push_back(req("crop_size", T::integer, "input height and width, pixels"));
  b.push_back(req("data_layout", T::string, "NCHW or NHWC"));
  b.push_back(req("backend", T::string, "ops backend: ref, onednn, cuda"));
  b.push_back(req("device", T::string, "device used, e.g. \"cpu\" or \"cuda:0\""));
  b.push_back(req("precision", T::string, "fp32, tf32, amp_fp16, amp_bf16 or pure_fp16"));
  b.push_back(req("graph_replayed_steps", T::integer, "steps run as a CUDA graph replay"));
  b.push_back(opt("gpu_memory_used_bytes", T::integer,
                  "device memory in use (total - free, CUDA context included); on GPUs only"));
  add_loss_scale(b);
  add_roofline(b, "a training step's, 3 x the forward (forward, backward-data, backward-weights)");
  b.push_back(opt("profiled", T::boolean,
                  "true: run with --profile (each op timed and synchronised: the figures are of "
                  "the profiled run); with --profile only"));
  s.push_back(std::move(bench));

  ReportRecordType prof{"profile",
                        "with --profile: once at the end of `rn50 train --benchmark` (after its "
                        "benchmark line; the measured steps profiled), and once per batch size "
                        "by `rn50 bench infer` (after its infer_benchmark line, of as many "
                        "profiled calls after the unprofiled timed ones)",
                        {},
                        false};
  auto& pr = prof.fields;
  pr.push_back(req("source", T::string, "what ran: \"train --benchmark\" or \"bench infer\""));
  pr.push_back(req("arch", T::string, "model: resnet50, resnet18, ..."));
  pr.push_back(req("precision", T::string,
                   "training precision (fp32, amp_bf16, ...) or engine precision (fp32, bf16, "
                   "int8)"));
  pr.push_back(req("device", T::string, "device used, e.g. \"cpu\" or \"cuda:0\""));
  pr.push_back(req("batch_size", T::integer, "images per step (per call)"));
  pr.push_back(req("crop_size", T::integer, "input height and width, pixels"));
  pr.push_back(req("steps", T::integer, "profiled steps (the measured ones; warmup excluded)"));
  pr.push_back(req("step_ms", T::number,
                   "mean wall milliseconds of a profiled step (training: without the data wait; "
                   "inference: one engine call)"));
  pr.push_back(req("ops_ms", T::number,
                   "the ops' exclusive milliseconds per step, summed (the rest of step_ms is "
                   "host code between ops)"));
  pr.push_back(req("ops", T::list,
                   "one object per op, longest first: op (\"conv fwd\", \"conv bwd_data\", "
                   "\"reorder conv weights (fwd)\", ...), family (conv, batchnorm, relu, add, "
                   "pool, linear, loss, sgd, copy, reorder, ...), phase (fwd, bwd_data, "
                   "bwd_weights, bwd, update, -), calls_per_step, ms_per_step (exclusive: a "
                   "nested reorder's time is its own row's), share (of step_ms, 0-1), gflops "
                   "(achieved GFLOP/s; null for ops without FLOPs), gbps (GB/s of the bytes "
                   "it must read and write, each tensor once; null without), and with a "
                   "roofline: roof_ms_per_step (max(FLOP / peak, bytes / bandwidth); 0 for "
                   "overhead such as reorders; null when its precision had no peak) and "
                   "roof_share (roof_ms_per_step / ms_per_step, 0-1, over 1 when its tensors "
                   "stayed in the caches; null for overhead), and impls ({implementation: "
                   "calls_per_step}: which implementation ran the op, e.g. the CPU "
                   "convolution registry's \"own_winograd_f43\"; absent when the backend "
                   "names none)"));
  pr.push_back(req("families", T::list,
                   "the ops summed by family, longest first: family, ms_per_step, share, "
                   "gflops, gbps, and with a roofline roof_ms_per_step and roof_share"));
  pr.push_back(opt("roofline", T::object,
                   "with --peak-file: the limits the ops were held against, peak_gflops "
                   "({precision: GFLOP/s}), memory_gbps (null when the file has no bandwidth), "
                   "roof_ms_per_step (the ops' roofline times summed: the least time the "
                   "machine needs for the step; null when an op had no peak) and roof_share "
                   "(roof_ms_per_step / step_ms, 0-1)"));
  s.push_back(std::move(prof));

  ReportRecordType loader{
      "loader", "by `rn50 bench loader` (appended to --report-file)", {}, false};
  auto& l = loader.fields;
  l.push_back(req("loader.ips", T::number, "images/s delivered by the input pipeline"));
  l.push_back(req("loader.images", T::integer, "images timed"));
  l.push_back(req("loader.seconds", T::number, "wall seconds timed"));
  l.push_back(req("loader.cpu_seconds", T::number, "user + system CPU seconds of the process"));
  l.push_back(req("loader.ips_per_cpu_second", T::number, "images per CPU second"));
  l.push_back(req("loader.bad_samples", T::integer, "undecodable images skipped"));
  l.push_back(req("workers", T::integer, "decode threads"));
  l.push_back(req("batch_size", T::integer, "images per batch"));
  l.push_back(req("split", T::string, "train or val"));
  l.push_back(req("exact_decode", T::boolean, "whole-image PIL-exact decoding (--exact-decode)"));
  l.push_back(req("image_root", T::string, "dataset root"));
  l.push_back(req("data_format", T::string,
                  "the store read: imagefolder, filelist, tfrecord or webdataset"));
  s.push_back(std::move(loader));

  ReportRecordType infer{"infer_benchmark",
                         "by `rn50 bench infer`, one per batch size (appended to --report-file), "
                         "and once by `rn50 eval --benchmark` (after its config line)",
                         {},
                         false};
  auto& f = infer.fields;
  f.push_back(req("batch_size", T::integer, "images per call"));
  f.push_back(req("infer.ips", T::number, "images/s over the timed calls"));
  f.push_back(req("infer.latency_avg_ms", T::number, "mean milliseconds per call"));
  f.push_back(req("infer.latency_p50_ms", T::number, "median milliseconds per call"));
  f.push_back(req("infer.latency_p90_ms", T::number,
                  "90th percentile, ms (linear interpolation, numpy's default)"));
  f.push_back(req("infer.latency_p95_ms", T::number, "95th percentile, ms"));
  f.push_back(req("infer.latency_p99_ms", T::number, "99th percentile, ms"));
  f.push_back(req("steps", T::integer, "timed calls (--benchmark-steps)"));
  f.push_back(req("warmup_steps", T::integer, "untimed calls before (--benchmark-warmup-steps)"));
  f.push_back(req("arch", T::string, "model: resnet50, resnet18, ..."));
  f.push_back(req("num_of_class", T::integer, "classes"));
  f.push_back(req("crop_size", T::integer, "input height and width, pixels"));
  f.push_back(req("precision", T::string, "engine precision: fp32, tf32, fp16, bf16 or int8"));
  f.push_back(req("device", T::string, "engine device: cpu or cuda:N"));
  f.push_back(opt("input", T::string,
                  "where each timed call's input came from: host (the CPU engine), device (kept "
                  "on the GPU between calls, as the torch peer times it) or host+upload (a GPU "
                  "engine with --include-upload: the upload and the logits' copy back timed "
                  "too) or loader (real images through the data loader, decode to logits: "
                  "time_engine_with_loader); always written since 2026-12-06 (before, GPU "
                  "engines timed host+upload)"));
  f.push_back(opt("data_time", T::number,
                  "with data loading (input loader: rn50 bench infer --image-root, rn50 eval "
                  "--benchmark on real images): mean seconds per batch waiting for the loader "
                  "(DLE's data_time)"));
  f.push_back(opt("data_share", T::number,
                  "with data loading: data_time's share of the mean latency, 0..1"));
  f.push_back(opt("image_root", T::string, "with data loading: the images read"));
  add_roofline(f, "the forward pass");
  s.push_back(std::move(infer));

  ReportRecordType acc{"infer_accuracy",
                       "by `rn50 bench infer --image-root IMAGE_ROOT`: the engine's accuracy over "
                       "<IMAGE_ROOT>/val with the eval transform, before the timing lines",
                       {},
                       false};
  auto& a = acc.fields;
  a.push_back(req("images", T::integer, "val images classified (unreadable ones skipped)"));
  a.push_back(req("top1", T::number, "percent of images whose top-1 class is the label"));
  a.push_back(req("top5", T::number, "percent with the label among the top 5"));
  a.push_back(req("arch", T::string, "model: resnet50, resnet18, ..."));
  a.push_back(req("precision", T::string, "engine precision: fp32, tf32, fp16, bf16 or int8"));
  a.push_back(req("device", T::string, "engine device: cpu or cuda:N"));
  a.push_back(req("resize_short", T::integer, "eval resize of the shorter side, pixels"));
  a.push_back(req("crop_size", T::integer, "center crop, pixels"));
  a.push_back(req("image_root", T::string, "the ImageFolder root"));
  s.push_back(std::move(acc));

  ReportRecordType sweep{"train_sweep",
                         "by `rn50 bench train`: the whole sweep as one line, the only line of "
                         "its --report-file (so the file is also one JSON document)",
                         {},
                         false};
  auto& w = sweep.fields;
  w.push_back(req("version", T::string, "rn50 version"));
  w.push_back(req("started", T::string, "local start time, ISO 8601"));
  w.push_back(req("seconds", T::number, "wall seconds of the whole sweep"));
  w.push_back(req("environment", T::object,
                  "hostname, os, cpu_model, cpu_cores, cpus_allowed, cpu_isa (the instruction "
                  "set the kernels run: core/cpu_info.h), git_revision; the "
                  "backend's (onednn version; gpu, gpu_memory_bytes, driver_cuda_version, "
                  "cuda_runtime, cudnn, cublaslt) and the communication libraries' (nccl, mpi) "
                  "versions"));
  w.push_back(req("world_size", T::integer, "processes in the job (mpirun -np N)"));
  w.push_back(req("communicator", T::string, "gradient communicator: single, mpi, nccl"));
  w.push_back(req("backend", T::string, "ops backend: ref, onednn, cuda"));
  w.push_back(req("device", T::string, "rank 0's device, e.g. \"cpu\" or \"cuda:0\""));
  w.push_back(req("arch", T::string, "model: resnet50, resnet18, ..."));
  w.push_back(req("num_of_class", T::integer, "classes of the fc layer"));
  w.push_back(req("crop_size", T::integer, "input height and width, pixels"));
  w.push_back(req("data_layout", T::string, "NCHW or NHWC"));
  w.push_back(req("data", T::string, "synthetic, or the ImageFolder root read"));
  w.push_back(req("steps", T::integer, "measured steps per repeat (--benchmark-steps)"));
  w.push_back(req("warmup_steps", T::integer,
                  "untimed steps before each repeat (--benchmark-warmup-steps)"));
  w.push_back(req("repeats", T::integer, "runs per point (--repeats)"));
  w.push_back(opt("gflops_per_image", T::number,
                  "GFLOP of one image's training step, 3 x the forward (2 x the conv and fc "
                  "multiply-adds, forward_flops in rn50/graph.h); sweeps before the roofline "
                  "lack it"));
  w.push_back(req(
      "points", T::list,
      "one object per (precision, batch_size): precision (fp32, tf32, amp_fp16, amp_bf16), "
      "batch_size (per process), world_size, ips (images/s of the whole job, one per repeat), "
      "ips_median, ips_min, ips_max, ips_per_rank_median, step_time_ms {mean, p50, p90, p95, "
      "p99} over every measured step of every repeat (rank 0), data_wait_share (seconds "
      "waiting for data / step seconds, 0-1), peak_host_rss_bytes (rank 0, max over repeats; -1: "
      "unknown), gpu_memory_used_bytes (GPUs only), loss (last step of the last repeat), "
      "achieved_gflops (ips_median x gflops_per_image), and with --peak-file holding a peak of "
      "the point's precision: peak_gflops, peak_op (matmul or conv3x3), peak_share "
      "(achieved_gflops / peak_gflops, 0-1)"));
  s.push_back(std::move(sweep));

  ReportRecordType peak{"peak",
                        "by `rn50 bench peak`, one per (op, precision) (appended to "
                        "--report-file; --peak-file of the benchmarks reads them)",
                        {},
                        false};
  auto& k = peak.fields;
  k.push_back(req("op", T::string,
                  "matmul (M = N = K = 2048) or conv3x3 (N 32, C = K = 256, 28x28, pad 1), "
                  "oneDNN forward inference; memory: copy or triad (STREAM's kernels, OpenMP)"));
  k.push_back(req("precision", T::string,
                  "fp32; bf16 (bf16 inputs, f32 output); int8 (u8 x s8 -> s32); memory (the "
                  "bandwidth roof)"));
  k.push_back(req("shape", T::string, "the problem timed"));
  k.push_back(opt("ops_per_call", T::number, "2 x the multiply-adds of one call (compute)"));
  k.push_back(opt("bytes_per_call", T::number,
                  "memory: bytes read + written by one call, each array once (STREAM's count)"));
  k.push_back(opt("gflops", T::number,
                  "GFLOP/s (int8: GOP/s) at the median call time; compute, unless skipped"));
  k.push_back(opt("gbps", T::number, "memory: GB/s (1e9 bytes/s) at the median call time"));
  k.push_back(opt("seconds_median", T::number, "median wall seconds of a call; unless skipped"));
  k.push_back(opt("seconds_min", T::number, "fastest call, seconds; unless skipped"));
  k.push_back(req("calls", T::integer, "timed calls (--benchmark-steps)"));
  k.push_back(req("warmup_calls", T::integer, "untimed calls before (--benchmark-warmup-steps)"));
  k.push_back(req("impl", T::string,
                  "oneDNN's implementation (impl_info_str, e.g. brg:avx512_core_bf16); empty "
                  "when skipped before one was chosen"));
  k.push_back(req("isa", T::string, "the instruction set oneDNN dispatches to"));
  k.push_back(req("threads", T::integer, "OpenMP threads (oneDNN uses them all)"));
  k.push_back(req("device", T::string, "cpu"));
  k.push_back(req("hardware", T::string, "the CPU model (/proc/cpuinfo)"));
  k.push_back(req("onednn", T::string, "oneDNN version"));
  k.push_back(opt("skipped", T::string, "why it was not measured (bf16 on a CPU without it)"));
  s.push_back(std::move(peak));
  return s;
}

bool type_matches(const nlohmann::json& v, const ReportField& f) {
  if (v.is_null()) return f.nullable || f.type == FieldType::number;
  switch (f.type) {
    case FieldType::integer:
      return v.is_number_integer();
    case FieldType::number:
      return v.is_number();
    case FieldType::string:
      return v.is_string();
    case FieldType::boolean:
      return v.is_boolean();
    case FieldType::list:
      return v.is_array();
    case FieldType::object:
      return v.is_object();
  }
  return false;
}

const char* type_of(const nlohmann::json& v) {
  if (v.is_null()) return "null";
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  return v.type_name();
}

std::string escape_md(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '|')
      o += "\\|";
    else
      o += ch;
  }
  return o;
}

void table(std::string& out, const std::vector<ReportField>& fields) {
  out += "| field | type | always | meaning |\n|---|---|---|---|\n";
  for (const ReportField& f : fields)
    out += fmt::format("| `{}` | {}{} | {} | {} |\n", f.name, field_type_name(f.type),
                       f.nullable ? " or null" : "", f.required ? "yes" : "no", escape_md(f.doc));
}

}  // namespace

const char* field_type_name(FieldType t) {
  switch (t) {
    case FieldType::integer:
      return "integer";
    case FieldType::number:
      return "number";
    case FieldType::string:
      return "string";
    case FieldType::boolean:
      return "boolean";
    case FieldType::list:
      return "list";
    case FieldType::object:
      return "object";
  }
  return "?";
}

const ReportField* ReportRecordType::find(std::string_view name) const {
  for (const ReportField& f : fields)
    if (f.name == name) return &f;
  return nullptr;
}

const std::vector<ReportRecordType>& report_schema() {
  static const std::vector<ReportRecordType> s = make_schema();
  return s;
}

const ReportRecordType& report_record_type(std::string_view type) {
  for (const ReportRecordType& t : report_schema())
    if (t.type == type) return t;
  RN50_FAIL("no report record type '{}' (src/core/report.cpp lists them)", type);
}

ReportRecord::ReportRecord(std::string_view type) : spec_(&report_record_type(type)) {
  j_["type"] = spec_->type;
  j_["schema_version"] = kReportSchemaVersion;
}

ReportRecord& ReportRecord::set_json(std::string_view name, json v) {
  const ReportField* f = spec_->find(name);
  RN50_CHECK(f != nullptr,
             "report record '{}' has no field '{}' (declare it in the schema table, "
             "src/core/report.cpp)",
             spec_->type, name);
  RN50_CHECK(type_matches(v, *f), "report field '{}' of '{}' is {}, got {} ({})", name, spec_->type,
             field_type_name(f->type), type_of(v), v.dump());
  j_[std::string(name)] = std::move(v);
  return *this;
}

ReportRecord& ReportRecord::set_flags(const json& flags) {
  RN50_CHECK(spec_->carries_flags, "report record '{}' does not carry flags", spec_->type);
  RN50_CHECK(flags.is_object(), "report record '{}': flags must be a JSON object", spec_->type);
  for (const auto& [k, v] : flags.items()) {
    if (spec_->find(k))
      set_json(k, v);
    else
      j_[k] = v;
  }
  return *this;
}

json ReportRecord::to_json() const {
  for (const ReportField& f : spec_->fields)
    RN50_CHECK(!f.required || j_.contains(f.name),
               "report record '{}' lacks its required field '{}'", spec_->type, f.name);
  return j_;
}

std::vector<std::string> check_report_line(const nlohmann::json& line,
                                           const std::vector<ReportField>* flag_fields) {
  std::vector<std::string> p;
  if (!line.is_object()) return {"not a JSON object"};
  if (!line.contains("type") || !line["type"].is_string()) return {"no string field \"type\""};
  const std::string type = line["type"];
  const ReportRecordType* spec = nullptr;
  for (const ReportRecordType& t : report_schema())
    if (t.type == type) spec = &t;
  if (!spec) return {fmt::format("unknown record type '{}'", type)};
  if (!line.contains("schema_version") || line["schema_version"] != kReportSchemaVersion)
    p.push_back(
        fmt::format("'{}': schema_version is {}, expected {}", type,
                    line.contains("schema_version") ? line["schema_version"].dump() : "missing",
                    kReportSchemaVersion));
  for (const auto& [k, v] : line.items()) {
    if (k == "type" || k == "schema_version") continue;
    const ReportField* f = spec->find(k);
    if (!f && spec->carries_flags) {
      if (!flag_fields) continue;
      for (const ReportField& ff : *flag_fields)
        if (ff.name == k) f = &ff;
    }
    if (!f) {
      p.push_back(fmt::format("'{}': unknown field '{}'", type, k));
      continue;
    }
    if (!type_matches(v, *f))
      p.push_back(fmt::format("'{}': field '{}' is {}, expected {}", type, k, type_of(v),
                              field_type_name(f->type)));
  }
  for (const ReportField& f : spec->fields)
    if (f.required && !line.contains(f.name))
      p.push_back(fmt::format("'{}': required field '{}' missing", type, f.name));
  if (spec->carries_flags && flag_fields)
    for (const ReportField& f : *flag_fields)
      if (f.required && !spec->find(f.name) && !line.contains(f.name))
        p.push_back(fmt::format("'{}': flag field '{}' missing", type, f.name));
  return p;
}

std::string report_schema_markdown(const std::vector<ReportField>& flag_fields) {
  std::string out = fmt::format(
      "# rn50 report schema (schema_version {})\n\n"
      "Generated from `report_schema()` in src/core/report.cpp and the flag table in\n"
      "src/config/flag_table.cpp by every build (tools/gen_docs.cpp); do not edit.\n\n"
      "A report file (`--report-file`) holds one JSON object per line. Every line starts with\n"
      "`\"type\"` (one of the record types below) and `\"schema_version\"`. Epochs are 0-based\n"
      "(the checkpoint folder names); `step` counts optimiser steps done; losses are\n"
      "label-smoothed cross-entropy; top1/top5 are percent; ips are images per wall-clock\n"
      "second; times are seconds; sizes bytes. A number that is NaN or infinite is written as\n"
      "null. Fields not marked \"always\" appear only when their condition holds.\n",
      kReportSchemaVersion);
  for (const ReportRecordType& t : report_schema()) {
    out += fmt::format("\n## `{}`\n\nWritten {}.\n\n", t.type, t.written);
    table(out, t.fields);
    if (t.carries_flags) {
      std::vector<ReportField> flags;
      for (const ReportField& f : flag_fields)
        if (!t.find(f.name)) flags.push_back(f);
      out += fmt::format(
          "\nand every flag of `rn50 train` under its config key (`--batch-size` -> "
          "`batch_size`), as resolved:\n\n");
      table(out, flags);
    }
  }
  return out;
}

namespace {
double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

ReportWriter::ReportWriter(const std::string& path, Mode mode, std::string what, Format format)
    : path_(path), what_(std::move(what)), format_(format), start_unix_(unix_now()) {
  if (path.empty()) return;
  std::filesystem::path p(path);
  if (p.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(p.parent_path(), ec);
    RN50_CHECK(!ec, "{} '{}': cannot create its directory: {}", what_, path, ec.message());
  }
  f_ = std::fopen(path.c_str(), mode == Mode::append ? "a" : "w");
  RN50_CHECK(f_ != nullptr, "{} '{}': cannot open: {}", what_, path, std::strerror(errno));
  if (format_ == Format::dllogger) {
    // The units DLE's scripts declare for the metrics rn50 logs under the same names.
    const std::pair<const char*, const char*> units[] = {
        {"train.loss", ""},           {"train.top1", "%"},      {"train.top5", "%"},
        {"train.lr", ""},             {"train.ips", "images/s"}, {"train.data_time", "s"},
        {"train.compute_time", "s"},  {"val.loss", ""},         {"val.top1", "%"},
        {"val.top5", "%"},            {"val.ips", "images/s"},   {"infer.ips", "images/s"},
        {"infer.latency_avg_ms", "ms"}, {"infer.latency_p90_ms", "ms"},
        {"infer.latency_p95_ms", "ms"}, {"infer.latency_p99_ms", "ms"}};
    for (const auto& [metric, unit] : units)
      put(dllogger_metadata_line(metric, unit, ":.5f", unix_now(), unix_now() - start_unix_));
  }
}

ReportWriter::~ReportWriter() {
  if (f_) std::fclose(f_);
}

void ReportWriter::write(const ReportRecord& record) {
  if (!f_) return;
  if (format_ == Format::dllogger) {
    const double now = unix_now();
    put(dllogger_log_line(record.to_json(), now, now - start_unix_));
  } else {
    put(record.to_json().dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
  }
}

void ReportWriter::put(std::string s) {
  s.push_back('\n');
  const bool ok = std::fwrite(s.data(), 1, s.size(), f_) == s.size() && std::fflush(f_) == 0;
  RN50_CHECK(ok, "{} '{}': write failed: {}", what_, path_, std::strerror(errno));
}

}  // namespace rn50
