// rn50: the CPU training backend's convolution implementations, one ordered list per direction
// (oneDNN's cpu_convolution_list in spirit): the first implementation that fits a call runs
// it. Which implementations fit is the policy of conv_algo.h (RN50_CONV_ALGO, the CPU, the
// shape); this file is the one place that lists them and their order. The choice is made once
// per shape (direction, tensors' shapes, dtypes and layouts, stride, pad and policy), named in
// --profile rows (OpProfiler::note_impl) and, with RN50_CONV_LOG, logged once per shape.
// RN50_CONV_IMPL=name pins one implementation wherever its kernel can compute the call.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/conv_algo.h"
#include "backend/cpu/onednn_backend.h"

namespace rn50::onednn {

/// The tensors of one convolution call, named as in the forward pass:
///   fwd:         x (N,C,H,W) read,  w (K,C,R,S) read,  y (N,K,OH,OW) written;
///   bwd_data:    x = dx written,    w read,            y = dy read;
///   bwd_weights: x read,            w = dw written,    y = dy read.
/// The one written is reached through `out`.
struct ConvCall {
  ConvDir dir;
  const Conv2dParams& p;
  const Tensor& x;
  const Tensor& w;
  const Tensor& y;
  Tensor& out;  ///< y (fwd), x (bwd_data) or w (bwd_weights)
};

/// One implementation of one direction.
struct ConvImpl {
  /// Its name in profiles, logs and tests, e.g. "own_winograd_f43" (static storage).
  const char* name;
  /// Whether it takes `c` under the active policy on this CPU (conv_algo.h's predicates and the
  /// kernel's own shape limits). The last entry of every list fits every call.
  bool (*fits)(const ConvCall& c);
  /// Whether its kernel can compute `c` on this CPU, whatever the speed rules say (what a call
  /// runs when RN50_CONV_IMPL forces this implementation).
  bool (*takes)(const ConvCall& c);
  /// Why it cannot run on this CPU at all (a missing instruction set), or nullptr.
  const char* (*unavailable)();
  /// Runs `c`; returns the name of what ran when more precise than `name` (oneDNN's entry:
  /// "onednn_winograd" or "onednn_direct", oneDNN choosing), else nullptr.
  const char* (*run)(OnednnBackend& be, const ConvCall& c);
};

/// The implementations of direction `dir`, in the order they are tried:
///   fwd, bwd_data: onednn_matmul_1x1, own_winograd_f43, own_winograd_f23_bf16, onednn;
///   bwd_weights:   onednn_matmul_1x1, own_wgrad_gemm, own_winograd_f43, own_winograd_f23_bf16,
///                  im2col_matmul, onednn.
std::span<const ConvImpl> conv_impls(ConvDir dir);

/// Every implementation's name, each once, in list order (onednn_matmul_1x1, own_wgrad_gemm,
/// own_winograd_f43, own_winograd_f23_bf16, im2col_matmul, onednn).
std::vector<std::string> conv_impl_names();

/// The implementation every convolution must take where its kernel can (RN50_CONV_IMPL, read
/// once; set_conv_impl overrides it), or "" for the registry's order. Tests and A/B runs use it
/// to pin one implementation: calls it cannot compute (another direction, dtype or shape) run
/// "onednn". Throws rn50::Error naming the variable when the name is not conv_impl_names()'s
/// (listing them), or when the implementation cannot run on this CPU (the reason).
std::string conv_forced_impl();
/// Overrides RN50_CONV_IMPL for this process ("" : the registry's order; std::nullopt: the
/// variable again). Checked as RN50_CONV_IMPL is, at the next convolution.
void set_conv_impl(std::optional<std::string> name);

/// The implementation `c` runs: with conv_forced_impl() F, F where F is in c.dir's list and
/// F.takes(c), else "onednn"; otherwise the first of conv_impls(c.dir) that fits `c` ("onednn"
/// fits every call). Throws what conv_forced_impl() throws.
const ConvImpl& choose_conv_impl(const ConvCall& c);

/// Chooses `c`'s implementation (once per shape on `be`: cached), names it to the active
/// profiler and runs it; with RN50_CONV_LOG=FILE (or "-": stderr) the first call of each shape
/// appends one line "conv <dir> x [N,C,H,W] w [K,C,R,S] y [...] stride S pad P <dtype>
/// <layout> policy <policy>: <implementation>". Throws what the implementation throws, and
/// rn50::Error when RN50_CONV_LOG's file cannot be opened.
void run_conv(OnednnBackend& be, const ConvCall& c);

/// "fwd", "bwd_data" or "bwd_weights".
const char* conv_dir_name(ConvDir dir);

/// "auto", "direct" or "matmul": RN50_CONV_ALGO's policy `a` as the logs name it.
const char* conv_policy_name(ConvAlgo a);

/// Whether RN50_CONV_LOG is set (its file is opened on the first call). Throws rn50::Error
/// when the file cannot be opened for appending.
bool conv_log_enabled();
/// Appends `line` (ending in a newline) to RN50_CONV_LOG's file, or to stderr for "-", whole
/// and flushed (thread-safe); nothing when the variable is unset. Throws as conv_log_enabled.
void conv_log_append(const std::string& line);

}  // namespace rn50::onednn
