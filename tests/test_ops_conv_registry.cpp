// The CPU convolution registry (src/backend/cpu/conv_registry.h):
//  * each direction's implementations in their priority order, every name once in
//    conv_impl_names();
//  * the choice follows the policy (RN50_CONV_ALGO): `direct` sends every call to oneDNN,
//    `matmul` the 1x1 NHWC convs to matmuls, f32 3x3 stride-1 NHWC convs to our Winograd F(4x4,
//    3x3) and strided 3x3 weight gradients to im2col; NCHW activations always to oneDNN;
//  * RN50_CONV_IMPL (set_conv_impl) pins each implementation in turn: where this CPU has it,
//    every direction that lists it runs it on a shape its kernel takes (the profile row names
//    it, so a test cannot pass on another path) and matches the float64 reference backend;
//    where the CPU lacks it, the first convolution is refused with the reason (the test says
//    which were skipped); an unknown name is refused listing the names;
//  * the profile's conv rows, table and JSON name the implementation that ran;
//  * the rule table (conv_rules.h): every row names a registry implementation in the lists of
//    its directions and an evidence file that exists; what it takes on ResNet-50's shapes for
//    every CPU class (no kernel runs); this process's class agrees with the (capped) ISA, and
//    under policy `auto` the registry's choice on this host is what the table says.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/conv_algo.h"
#include "backend/cpu/conv_registry.h"
#include "backend/cpu/conv_rules.h"
#include "backend/cpu/onednn_backend.h"
#include "op_backend_fixture.h"
#include "rn50/backend.h"
#include "rn50/error.h"
#include "rn50/profile.h"
#include "core/cpu_info.h"

namespace rn50::test {
namespace {

using onednn::ConvAlgo;
using onednn::ConvCall;
using onednn::ConvDir;
using onednn::ConvImpl;

/// Sets the policy and the pinned implementation for one scope, handing both back afterwards.
struct RegistryScope {
  RegistryScope(std::optional<ConvAlgo> a, std::optional<std::string> impl) {
    onednn::set_conv_algo(a);
    onednn::set_conv_impl(std::move(impl));
  }
  ~RegistryScope() {
    onednn::set_conv_algo(std::nullopt);
    onednn::set_conv_impl(std::nullopt);
  }
};

std::vector<std::string> names_of(ConvDir d) {
  std::vector<std::string> v;
  for (const ConvImpl& i : onednn::conv_impls(d)) v.push_back(i.name);
  return v;
}

Tensor meta(std::vector<int64_t> shape, DType d, Layout l) {
  return Tensor::empty(std::move(shape), d, l);
}

/// One convolution's tensors as metadata, in forward names (ConvCall).
struct Call {
  Conv2dParams p;
  Tensor x, w, y;
  ConvCall call(ConvDir d) {
    Tensor& out = d == ConvDir::fwd ? y : d == ConvDir::bwd_data ? x : w;
    return ConvCall{d, p, x, w, y, out};
  }
};

/// N,C,HxW -> K with an RxR kernel, NHWC activations (or `act`) and OIHW weights in `dt`.
Call conv(int64_t n, int64_t c, int64_t hw, int64_t k, int64_t r, int stride, int pad,
          DType dt = DType::f32, Layout act = Layout::NHWC) {
  const int64_t o = (hw + 2 * pad - r) / stride + 1;
  return Call{Conv2dParams{stride, pad}, meta({n, c, hw, hw}, dt, act), meta({k, c, r, r}, dt, NCHW),
              meta({n, k, o, o}, dt, act)};
}

std::string chosen(Call c, ConvDir d) { return onednn::choose_conv_impl(c.call(d)).name; }

constexpr ConvDir kDirs[] = {ConvDir::fwd, ConvDir::bwd_data, ConvDir::bwd_weights};

TEST(ConvRegistry, ListsTheImplementationsInPriorityOrder) {
  const std::vector<std::string> fwd{"onednn_matmul_1x1", "own_winograd_f43",
                                     "own_winograd_f23_bf16", "onednn"};
  EXPECT_EQ(names_of(ConvDir::fwd), fwd);
  EXPECT_EQ(names_of(ConvDir::bwd_data), fwd);
  EXPECT_EQ(names_of(ConvDir::bwd_weights),
            (std::vector<std::string>{"onednn_matmul_1x1", "own_wgrad_gemm", "own_winograd_f43",
                                      "own_winograd_f23_bf16", "im2col_matmul", "onednn"}));
  EXPECT_EQ(onednn::conv_impl_names(),
            (std::vector<std::string>{"onednn_matmul_1x1", "own_wgrad_gemm", "own_winograd_f43",
                                      "own_winograd_f23_bf16", "im2col_matmul", "onednn"}));
}

TEST(ConvRegistry, TheChoiceFollowsThePolicy) {
  const Call c1 = conv(2, 64, 14, 64, 1, 1, 0);      // 1x1
  const Call c3 = conv(8, 64, 28, 64, 3, 1, 1);      // 3x3 stride 1: 392 tiles of 4x4
  const Call c3s2 = conv(2, 64, 28, 128, 3, 2, 1);   // 3x3 stride 2
  const Call nchw = conv(2, 64, 14, 64, 1, 1, 0, DType::f32, NCHW);
  {
    RegistryScope s(ConvAlgo::direct, "");
    for (ConvDir d : kDirs)
      for (const Call& c : {c1, c3, c3s2, nchw}) EXPECT_EQ(chosen(c, d), "onednn");
  }
  RegistryScope s(ConvAlgo::matmul, "");
  for (ConvDir d : kDirs) {
    SCOPED_TRACE(onednn::conv_dir_name(d));
    EXPECT_EQ(chosen(c1, d), "onednn_matmul_1x1");
    EXPECT_EQ(chosen(c3, d), "own_winograd_f43");
    EXPECT_EQ(chosen(nchw, d), "onednn");
  }
  EXPECT_EQ(chosen(c3s2, ConvDir::bwd_weights), "im2col_matmul");
  EXPECT_EQ(chosen(c3s2, ConvDir::fwd), "onednn");
}

TEST(ConvRegistry, AnUnknownPinnedNameIsRefusedListingTheNames) {
  RegistryScope s(std::nullopt, "winograd");
  try {
    onednn::conv_forced_impl();
    FAIL() << "accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("RN50_CONV_IMPL is 'winograd'"), std::string::npos) << m;
    EXPECT_NE(m.find("own_winograd_f43, own_winograd_f23_bf16"), std::string::npos) << m;
  }
}

/// Shapes to try each pinned implementation on: its kernel takes at least one of them in every
/// direction that lists it (C a multiple of 64 for our weight-gradient GEMM, of 16 for bf16
/// Winograd, enough tiles for our f32 Winograd).
const Call kCandidates[] = {
    conv(2, 64, 8, 64, 1, 1, 0),    // 1x1
    conv(2, 64, 9, 64, 1, 2, 0),    // strided 1x1
    conv(4, 64, 24, 64, 3, 1, 1),   // 3x3 stride 1: 144 tiles of 4x4
    conv(2, 64, 12, 64, 3, 2, 1),   // 3x3 stride 2
};

/// Runs direction `d` of `c` in dtype `dt` on `be` (a profiling backend) and against the
/// reference; returns the implementations the profile row names.
std::map<std::string, int64_t> run_and_check(Backend& be, const Call& c, ConvDir d, DType dt,
                                             std::mt19937_64& rng) {
  const Tensor x = random_tensor(c.x.shape(), rng, -1, 1, F32, NCHW);
  const Tensor w = random_tensor(c.w.shape(), rng, -1, 1, F32, NCHW);
  const Tensor y = random_tensor(c.y.shape(), rng, -1, 1, F32, NCHW);
  Backend& ref = ref_backend();
  OpProfiler prof;
  Tensor got, want;
  {
    OpProfiler::Activation on(prof);
    if (d == ConvDir::fwd) {
      got = nan_output(be, c.y.shape(), dt, NHWC);
      be.conv2d_fwd(c.p, upload(be, x, dt, NHWC), upload(be, w, dt, NCHW), got);
    } else if (d == ConvDir::bwd_data) {
      got = nan_output(be, c.x.shape(), dt, NHWC);
      be.conv2d_bwd_data(c.p, upload(be, y, dt, NHWC), upload(be, w, dt, NCHW), got);
    } else {
      got = nan_output(be, c.w.shape(), dt, NCHW);
      be.conv2d_bwd_weights(c.p, upload(be, x, dt, NHWC), upload(be, y, dt, NHWC), got);
    }
  }
  if (d == ConvDir::fwd) {
    want = Tensor::empty(c.y.shape(), F64);
    ref.conv2d_fwd(c.p, ref_input(x, dt, NHWC), ref_input(w, dt, NCHW), want);
  } else if (d == ConvDir::bwd_data) {
    want = Tensor::empty(c.x.shape(), F64);
    ref.conv2d_bwd_data(c.p, ref_input(y, dt, NHWC), ref_input(w, dt, NCHW), want);
  } else {
    want = Tensor::empty(c.w.shape(), F64);
    ref.conv2d_bwd_weights(c.p, ref_input(x, dt, NHWC), ref_input(y, dt, NHWC), want);
  }
  EXPECT_TRUE(all_close(std::string("conv ") + onednn::conv_dir_name(d) + " " + dtype_name(dt),
                        download(be, got), want, for_dtype(kConv, dt)));
  for (const OpProfiler::Row& r : prof.rows())
    if (r.family == "conv") return r.impls;
  return {};
}

TEST(ConvRegistry, EachPinnedImplementationRunsWhereItsKernelTakesTheShapeOrIsRefused) {
  std::mt19937_64 rng(20261206);
  auto be = make_profiling_backend(make_backend("onednn"));
  std::vector<DType> dtypes{DType::f32};
  if (onednn::OnednnBackend::bf16_available()) dtypes.push_back(DType::bf16);
  std::string skipped;
  for (const std::string& name : onednn::conv_impl_names()) {
    SCOPED_TRACE("RN50_CONV_IMPL=" + name);
    RegistryScope s(std::nullopt, name);
    std::string refused;
    try {
      onednn::conv_forced_impl();
    } catch (const Error& e) {
      refused = e.what();
    }
    if (!refused.empty()) {
      EXPECT_NE(refused.find("RN50_CONV_IMPL is '" + name + "': "), std::string::npos) << refused;
      EXPECT_NE(refused.find("needs AVX-512"), std::string::npos) << refused;
      // The first convolution is refused the same way.
      const Call c = kCandidates[2];
      Tensor y = be->alloc(c.y.shape(), DType::f32, NHWC);
      EXPECT_THROW(be->conv2d_fwd(c.p, be->alloc(c.x.shape(), DType::f32, NHWC),
                                  be->alloc(c.w.shape(), DType::f32, NCHW), y),
                   Error);
      skipped += "  " + refused + "\n";
      continue;
    }
    for (ConvDir d : kDirs) {
      const std::vector<std::string> listed = names_of(d);
      if (std::find(listed.begin(), listed.end(), name) == listed.end()) continue;
      int ran = 0;
      for (DType dt : dtypes) {
        for (const Call& meta_call : kCandidates) {
          Call c = meta_call;
          c.x = meta(c.x.shape(), dt, NHWC);
          c.w = meta(c.w.shape(), dt, NCHW);
          c.y = meta(c.y.shape(), dt, NHWC);
          const ConvImpl& impl = onednn::choose_conv_impl(c.call(d));
          if (impl.name != name) continue;
          SCOPED_TRACE(std::string(onednn::conv_dir_name(d)) + " " + dtype_name(dt) + " " +
                       c.x.str() + " -> " + c.y.str());
          const std::map<std::string, int64_t> impls = run_and_check(*be, c, d, dt, rng);
          ASSERT_EQ(impls.size(), 1u);
          const std::string ran_name = impls.begin()->first;
          if (name == "onednn")
            EXPECT_TRUE(ran_name == "onednn_direct" || ran_name == "onednn_winograd") << ran_name;
          else
            EXPECT_EQ(ran_name, name);
          ++ran;
        }
      }
      EXPECT_GT(ran, 0) << "no candidate shape for " << onednn::conv_dir_name(d);
    }
  }
  if (!skipped.empty())
    std::printf("implementations this CPU lacks (not run):\n%s", skipped.c_str());
}

TEST(ConvRegistry, ProfileRowsTableAndJsonNameTheImplementation) {
  RegistryScope s(ConvAlgo::direct, "");
  std::mt19937_64 rng(7);
  auto be = make_profiling_backend(make_backend("onednn"));
  const Call c = conv(2, 16, 8, 16, 3, 2, 1);
  OpProfiler prof;
  {
    OpProfiler::Activation on(prof);
    const Tensor x = upload(*be, random_tensor(c.x.shape(), rng, -1, 1, F32, NCHW), F32, NHWC);
    const Tensor w = upload(*be, random_tensor(c.w.shape(), rng, -1, 1, F32, NCHW), F32, NCHW);
    Tensor y = be->alloc(c.y.shape(), F32, NHWC);
    for (int i = 0; i < 2; ++i) be->conv2d_fwd(c.p, x, w, y);
  }
  prof.add_step(1.0);
  const ProfileSummary sum = summarize_profile(prof);
  const ProfileSummary::Op* row = nullptr;
  for (const ProfileSummary::Op& o : sum.ops)
    if (o.op == "conv fwd") row = &o;
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->impls, (std::map<std::string, double>{{"onednn_direct", 2.0}}));
  const std::string table = profile_table(sum, "t");
  EXPECT_NE(table.find("| implementations (calls/step) |"), std::string::npos) << table;
  EXPECT_NE(table.find("| onednn_direct 2 |"), std::string::npos) << table;
  const auto ops = profile_ops_json(sum);
  bool found = false;
  for (const auto& o : ops)
    if (o["op"] == "conv fwd") {
      found = true;
      EXPECT_EQ(o.at("impls").at("onednn_direct"), 2.0) << o.dump();
    } else {
      EXPECT_FALSE(o.contains("impls")) << o.dump();
    }
  EXPECT_TRUE(found);
}

// ---- the rule table ----

TEST(ConvRules, EveryRowNamesARegisteredImplementationAndItsEvidence) {
  ASSERT_FALSE(onednn::conv_rules().empty());
  for (const onednn::ConvRule& r : onednn::conv_rules()) {
    SCOPED_TRACE(std::string(r.impl) + ": " + r.shape_text);
    EXPECT_NE(std::string(r.impl), "onednn") << "oneDNN's entry is the fallback, not a rule";
    EXPECT_TRUE(r.dt == DType::f32 || r.dt == DType::bf16);
    EXPECT_NE(r.cpus, 0);
    EXPECT_NE(r.dirs, 0);
    for (int bit = 0; bit < 3; ++bit) {
      if (!(r.dirs & (1 << bit))) continue;
      const std::vector<std::string> names = names_of(kDirs[bit]);
      EXPECT_NE(std::find(names.begin(), names.end(), r.impl), names.end())
          << "not in the " << onednn::conv_dir_name(kDirs[bit]) << " list";
    }
    const std::string ev = r.evidence;
    EXPECT_EQ(ev.rfind("bench/results/cpu/", 0), 0u) << ev;
    const std::filesystem::path file = std::filesystem::path(RN50_SOURCE_DIR) / ev;
    std::ifstream in(file);
    ASSERT_TRUE(in.good()) << "evidence file missing: " << file;
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NE(text.find("Command"), std::string::npos) << file << " names no command";
  }
}

/// What each CPU class's rules take, on ResNet-50's convolutions at 224 px (no kernel runs).
TEST(ConvRules, EachCpuClassTakesWhatWasMeasuredThere) {
  using onednn::ConvShapeInfo;
  auto takes = [](onednn::CpuClass c, const char* impl, ConvDir d, DType dt, ConvShapeInfo s) {
    return onednn::conv_rule_takes(c, impl, d, dt, s);
  };
  const ConvShapeInfo c3_56{64, 64, 3, 1, 56 * 56}, c3_7{512, 512, 3, 1, 49},
      c3s2_14{256, 256, 3, 2, 196}, c3s2_28{128, 128, 3, 2, 784}, c1{256, 64, 1, 1, 3136},
      stem{3, 64, 7, 2, 112 * 112};
  for (const onednn::CpuClass c :
       {onednn::kCpuAvx2, onednn::kCpuAvx512, onednn::kCpuZen5, onednn::kCpuAmx}) {
    SCOPED_TRACE(onednn::cpu_class_name(c));
    const bool avx2 = c == onednn::kCpuAvx2, amx = c == onednn::kCpuAmx;
    // f32: without AVX-512 our Winograd F(4x4) in every direction and im2col for every KxK
    // weight gradient; with it im2col for the stride-2 3x3s only (Winograd is oneDNN's).
    for (ConvDir d : kDirs)
      EXPECT_EQ(takes(c, "own_winograd_f43", d, DType::f32, c3_56), avx2);
    EXPECT_EQ(takes(c, "im2col_matmul", ConvDir::bwd_weights, DType::f32, stem), avx2);
    EXPECT_EQ(takes(c, "im2col_matmul", ConvDir::bwd_weights, DType::f32, c3_56), avx2);
    EXPECT_TRUE(takes(c, "im2col_matmul", ConvDir::bwd_weights, DType::f32, c3s2_28));
    EXPECT_FALSE(takes(c, "im2col_matmul", ConvDir::fwd, DType::f32, c3s2_28));
    // bf16 on AMX: 1x1 backward as matmuls, KxK weight gradients to 14x14 as im2col.
    EXPECT_EQ(takes(c, "onednn_matmul_1x1", ConvDir::bwd_data, DType::bf16, c1), amx);
    EXPECT_EQ(takes(c, "onednn_matmul_1x1", ConvDir::bwd_weights, DType::bf16, c1), amx);
    EXPECT_FALSE(takes(c, "onednn_matmul_1x1", ConvDir::fwd, DType::bf16, c1));
    EXPECT_FALSE(takes(c, "onednn_matmul_1x1", ConvDir::bwd_data, DType::f32, c1));
    EXPECT_EQ(takes(c, "im2col_matmul", ConvDir::bwd_weights, DType::bf16, c3s2_14), amx);
    EXPECT_FALSE(takes(c, "im2col_matmul", ConvDir::bwd_weights, DType::bf16, c3s2_28));
    // bf16 with AVX-512 BF16 and no AMX: our Winograd F(2x2) from 14x14 up, not at 7x7.
    const bool bf16_own = !avx2 && !amx;
    for (ConvDir d : kDirs) {
      EXPECT_EQ(takes(c, "own_winograd_f23_bf16", d, DType::bf16, c3_56), bf16_own);
      EXPECT_FALSE(takes(c, "own_winograd_f23_bf16", d, DType::bf16, c3_7));
    }
    EXPECT_EQ(takes(c, "own_wgrad_gemm", ConvDir::bwd_weights, DType::bf16, c3_7), bf16_own);
    EXPECT_FALSE(takes(c, "own_wgrad_gemm", ConvDir::fwd, DType::bf16, c3_7));
  }
}

TEST(ConvRules, ThisProcessClassFollowsTheCappedIsaAndTheChoiceFollowsTheTable) {
  const CpuInfo& ci = cpu_info();
  const onednn::CpuClass c = onednn::cpu_class();
  std::printf("cpu class: %s (ISA %s)\n", onednn::cpu_class_name(c), isa_level_name(ci.level));
  if (ci.level < IsaLevel::avx512_core) {
    EXPECT_EQ(c, onednn::kCpuAvx2);
  } else if (ci.level < IsaLevel::avx512_core_amx) {
    EXPECT_TRUE(c == onednn::kCpuAvx512 || c == onednn::kCpuZen5);
  } else {
    EXPECT_EQ(c, onednn::kCpuAmx);
  }
  // Under `auto` a stride-2 3x3's f32 weight gradient goes to im2col on every class (the
  // table), and a stride-1 3x3's f32 forward to our Winograd exactly where the table says.
  RegistryScope s(ConvAlgo::automatic, "");
  const Call c3 = conv(8, 64, 28, 64, 3, 1, 1);
  const Call c3s2 = conv(2, 64, 28, 128, 3, 2, 1);
  EXPECT_EQ(chosen(c3s2, ConvDir::bwd_weights), "im2col_matmul");
  const bool f43 = onednn::conv_rule_takes(c, "own_winograd_f43", ConvDir::fwd, DType::f32,
                                           {64, 64, 3, 1, 28 * 28});
  EXPECT_EQ(chosen(c3, ConvDir::fwd), f43 ? "own_winograd_f43" : "onednn");
}

}  // namespace
}  // namespace rn50::test
