// The CPU engine's conv epilogue (infer/conv_epilogue.h): a residual shortcut added as a binary
// post-op that reads the destination's own buffer gives what the sum post-op gives, against a
// float64 reference (bf16; INT8 with u8 and s8 shortcuts, ReLU and QAT's clip; a reduction long
// enough for oneDNN to split it), and a whole ResNet-50 engine gives the same logits with
// either; the automatic rule takes the binary add only for large destinations of brgconv_1x1
// convs whose binary form runs in oneDNN's jit 1x1 kernel of the same instruction set, and no
// policy takes it in oneDNN's AMX 1x1 kernel before 3.4 (wrong there). INT8 ResNet-50 engines
// at batch 32, join by join on every instruction set: test_infer_int8_joins.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <dnnl.hpp>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/bf16.h"
#include "infer/conv_epilogue.h"
#include "infer_test_util.h"
#include "rn50/backend.h"
#include "rn50/inference.h"

namespace rn50 {
namespace {

using dnnl::memory;
using onednn::ResidualJoin;
using tag = memory::format_tag;
using dt = memory::data_type;

/// For its lifetime, CPU engine convs join their shortcuts as `j` says.
struct JoinPolicy {
  explicit JoinPolicy(ResidualJoin j) { onednn::set_residual_join(j); }
  ~JoinPolicy() { onednn::set_residual_join(std::nullopt); }
  JoinPolicy(const JoinPolicy&) = delete;
  JoinPolicy& operator=(const JoinPolicy&) = delete;
};

bool cpu_has_bf16() {
  return make_backend("onednn")->supports(Op::conv2d, DType::bf16, Layout::NHWC);
}

/// Whether oneDNN's effective instruction set here includes `want`.
bool isa_has(dnnl::cpu_isa want) {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  return (isa & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
}

/// Whether oneDNN runs AVX-512 kernels here (its jit 1x1 kernels take the binary add there).
bool cpu_has_avx512() { return isa_has(dnnl::cpu_isa::avx512_core); }

/// Whether oneDNN runs AMX kernels here.
bool cpu_has_amx() { return isa_has(dnnl::cpu_isa::avx512_core_amx); }

/// A 1x1 stride-1 NHWC conv with a shortcut: src (n, c, hw, hw) of `src_dt`, weights bf16 for
/// a bf16 conv else s8, destination `dst_dt` over the shortcut's buffer (stored as `res_dt`).
struct Case {
  const char* name;
  dt src_dt, dst_dt, res_dt;
  int64_t n, c, k, hw;
  dnnl::algorithm tail;
  float lo, hi;  // clip bounds (tail eltwise_clip)
};

/// The element of a bf16 / u8 / s8 buffer as a double.
double value_at(const void* p, dt d, int64_t i) {
  switch (d) {
    case dt::bf16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case dt::u8: return static_cast<const uint8_t*>(p)[i];
    case dt::s8: return static_cast<const int8_t*>(p)[i];
    default: return static_cast<const float*>(p)[i];
  }
}

struct Outcome {
  std::vector<double> got;  ///< the destination after the call
  int binary_post_op = -1;
  std::string impl;
  std::string binary_refused;  ///< EpilogueConv::binary_refused
};

/// Runs case `cs` under join policy `j` with the data drawn from `seed`; `ref` receives the
/// float64 result before the destination's rounding (the same for every policy).
Outcome run_case(const Case& cs, ResidualJoin j, uint64_t seed, std::vector<double>* ref) {
  const JoinPolicy policy(j);
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const bool q = cs.src_dt != dt::bf16;
  const memory::desc src({cs.n, cs.c, cs.hw, cs.hw}, cs.src_dt, tag::nhwc),
      dst({cs.n, cs.k, cs.hw, cs.hw}, cs.dst_dt, tag::nhwc),
      res({cs.n, cs.k, cs.hw, cs.hw}, cs.res_dt, tag::nhwc),
      w_any({cs.k, cs.c, 1, 1}, q ? dt::s8 : dt::bf16, tag::any), b_md({cs.k}, dt::f32, tag::x);
  const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference,
                                          dnnl::algorithm::convolution_direct, src, w_any, b_md,
                                          dst, {1, 1}, {0, 0}, {0, 0});
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> uf(0.5f, 1.5f);
  onednn::ConvEpilogue e;
  e.residual = true;
  e.residual_md = res;
  e.tail = cs.tail;
  e.tail_alpha = cs.lo;
  e.tail_beta = cs.hi;
  if (q) {
    for (int64_t k = 0; k < cs.k; ++k) e.output_scales.push_back(0.002f * uf(gen));
    e.residual_scale = 0.7f * uf(gen);
  }
  const onednn::EpilogueConv ec = onednn::make_epilogue_conv(d, e, eng);
  // Data: the source, the weights (OIHW in the conv's precision), the bias, the shortcut.
  const int64_t ns = cs.n * cs.hw * cs.hw * cs.c, nw = cs.k * cs.c,
                nd_ = cs.n * cs.hw * cs.hw * cs.k;
  std::vector<uint8_t> sbuf(static_cast<size_t>(ns * 2)), wbuf(static_cast<size_t>(nw * 2)),
      dbuf(static_cast<size_t>(nd_ * 2));
  std::vector<float> bias(static_cast<size_t>(cs.k));
  auto fill = [&](std::vector<uint8_t>& buf, dt t, int64_t count) {
    std::uniform_int_distribution<int> u8(0, 255), s8(-127, 127);
    for (int64_t i = 0; i < count; ++i) {
      if (t == dt::bf16)
        reinterpret_cast<uint16_t*>(buf.data())[i] = float_to_bf16(nd(gen));
      else if (t == dt::u8)
        buf[static_cast<size_t>(i)] = static_cast<uint8_t>(u8(gen));
      else
        reinterpret_cast<int8_t*>(buf.data())[i] = static_cast<int8_t>(s8(gen));
    }
  };
  fill(sbuf, cs.src_dt, ns);
  fill(wbuf, q ? dt::s8 : dt::bf16, nw);
  fill(dbuf, cs.res_dt, nd_);
  for (float& b : bias) b = q ? 50.f * nd(gen) : nd(gen);
  if (ref) {
    ref->assign(static_cast<size_t>(nd_), 0.0);
    for (int64_t p = 0; p < nd_ / cs.k; ++p)
      for (int64_t k = 0; k < cs.k; ++k) {
        double acc = bias[static_cast<size_t>(k)];
        for (int64_t c = 0; c < cs.c; ++c)
          acc += value_at(sbuf.data(), cs.src_dt, p * cs.c + c) *
                 value_at(wbuf.data(), q ? dt::s8 : dt::bf16, k * cs.c + c);
        const int64_t i = p * cs.k + k;
        double v = (q ? e.output_scales[static_cast<size_t>(k)] * acc : acc) +
                   double(e.residual_scale) * value_at(dbuf.data(), cs.res_dt, i);
        if (cs.tail == dnnl::algorithm::eltwise_relu) v = std::max(v, 0.0);
        if (cs.tail == dnnl::algorithm::eltwise_clip) v = std::clamp<double>(v, cs.lo, cs.hi);
        (*ref)[static_cast<size_t>(i)] = v;
      }
  }
  const memory::desc wu({cs.k, cs.c, 1, 1}, q ? dt::s8 : dt::bf16, tag::oihw);
  memory w_user(wu, eng, wbuf.data()), w(ec.pd.weights_desc(), eng);
  dnnl::reorder(w_user, w).execute(strm, w_user, w);
  memory s_m(src, eng, sbuf.data()), d_m(dst, eng, dbuf.data()), b_m(b_md, eng, bias.data());
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, s_m}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b_m}, {DNNL_ARG_DST, d_m}};
  if (ec.binary_post_op >= 0)
    args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(ec.binary_post_op) | DNNL_ARG_SRC_1] = d_m;
  dnnl::convolution_forward(ec.pd).execute(strm, args);
  strm.wait();
  Outcome o;
  o.binary_post_op = ec.binary_post_op;
  o.impl = ec.pd.impl_info_str();
  o.binary_refused = ec.binary_refused;
  for (int64_t i = 0; i < nd_; ++i) o.got.push_back(value_at(dbuf.data(), cs.dst_dt, i));
  return o;
}

// Each case under the sum post-op and under the forced binary add: within the destination's
// rounding of the float64 reference (bf16: 2^-8 relative; INT8: the nearest code, or one off
// where the f32 arithmetic lands next to a tie), and the two paths agree as closely.
TEST(ConvEpilogue, BinaryAddOverTheShortcutsBufferEqualsTheSumPostOp) {
  using A = dnnl::algorithm;
  std::vector<Case> cases = {
      {"int8 u8 shortcut, relu", dt::u8, dt::u8, dt::u8, 2, 64, 256, 8, A::eltwise_relu, 0, 0},
      {"int8 s8 shortcut, relu", dt::u8, dt::u8, dt::s8, 2, 128, 64, 6, A::eltwise_relu, 0, 0},
      {"int8 QAT clip [0, 127]", dt::u8, dt::u8, dt::u8, 1, 64, 128, 7, A::eltwise_clip, 0, 127},
      {"int8 long reduction", dt::u8, dt::u8, dt::u8, 1, 1024, 64, 5, A::eltwise_relu, 0, 0},
  };
  if (cpu_has_bf16()) {
    cases.push_back({"bf16 relu", dt::bf16, dt::bf16, dt::bf16, 2, 64, 256, 8, A::eltwise_relu,
                     0, 0});
    cases.push_back({"bf16 long reduction", dt::bf16, dt::bf16, dt::bf16, 1, 1024, 64, 5,
                     A::eltwise_relu, 0, 0});
  }
  int binary_built = 0, refused = 0;
  for (const Case& cs : cases) {
    std::vector<double> ref;
    const Outcome sum = run_case(cs, ResidualJoin::sum, 7, &ref);
    const Outcome bin = run_case(cs, ResidualJoin::binary, 7, nullptr);
    EXPECT_EQ(sum.binary_post_op, -1) << cs.name;
    binary_built += bin.binary_post_op >= 0;
    refused += !bin.binary_refused.empty();
    std::printf("%s: sum in %s, binary add in %s (post-op %d)%s%s\n", cs.name, sum.impl.c_str(),
                bin.impl.c_str(), bin.binary_post_op,
                bin.binary_refused.empty() ? "" : ", refused: ", bin.binary_refused.c_str());
    const bool q = cs.dst_dt != dt::bf16;
    const double lo = cs.dst_dt == dt::u8 ? 0 : -128, hi = cs.dst_dt == dt::u8 ? 255 : 127;
    int64_t off_by_one = 0, nonzero = 0;
    for (const Outcome* o : {&sum, &bin}) {
      for (size_t i = 0; i < ref.size(); ++i) {
        const double want = q ? std::min(hi, std::max(lo, std::nearbyint(ref[i]))) : ref[i];
        const double err = std::fabs(o->got[i] - want);
        nonzero += o->got[i] != 0;
        if (q) {
          ASSERT_LE(err, 1.0) << cs.name << " element " << i << " ref " << ref[i];
          off_by_one += err > 0;
        } else {
          ASSERT_LE(err, std::ldexp(std::fabs(want), -8) + 1e-6)
              << cs.name << " element " << i << " got " << o->got[i] << " want " << want;
        }
      }
    }
    // One-off codes only next to ties (the f32 sums round differently from float64).
    if (q) {
      EXPECT_LT(off_by_one, static_cast<int64_t>(ref.size() / 50)) << cs.name;
    }
    EXPECT_GT(nonzero, static_cast<int64_t>(ref.size() / 4)) << cs.name << ": outputs all zero";
  }
  // On AVX-512 CPUs oneDNN builds the binary form for every case; the engine refuses it only
  // in oneDNN's AMX 1x1 kernel before 3.4 (binary_join_kernel_wrong), so on AMX CPUs only.
  if (cpu_has_avx512()) {
    EXPECT_EQ(binary_built + refused, static_cast<int>(cases.size()));
  }
  if (!cpu_has_amx()) {
    EXPECT_EQ(refused, 0);
  }
}

// The choice between the two forms as a function of what oneDNN offers, on any CPU: the
// implementation names of an AMX Xeon (Sapphire Rapids, oneDNN 2.6.3: the sum form in
// brgconv_1x1, the binary form in the AMX 1x1 kernel, which writes past its image where the
// plane is three tiles of rows: the 6x6 case above was 34 codes off there), of the AVX-512
// EPYCs, and of an AVX2 CPU.
TEST(ConvEpilogue, JoinChoiceRefusesOneDnnsAmx1x1KernelBefore34) {
  using onednn::binary_join_kernel_wrong;
  using onednn::take_binary_join;
  const int v263 = 20603, v34 = 30400;
  const size_t big = size_t{25} << 20, small = size_t{1} << 20;
  for (const char* amx : {"jit_1x1:avx512_core_amx_int8", "jit_1x1:avx512_core_amx_bf16",
                          "jit_1x1:avx512_core_amx"}) {
    EXPECT_TRUE(binary_join_kernel_wrong(amx, v263)) << amx;
    EXPECT_TRUE(binary_join_kernel_wrong(amx, 30399)) << amx;
    EXPECT_FALSE(binary_join_kernel_wrong(amx, v34)) << amx;
    for (auto policy : {ResidualJoin::automatic, ResidualJoin::binary, ResidualJoin::sum})
      EXPECT_FALSE(take_binary_join(policy, "brgconv_1x1:avx512_core_amx_int8", amx, big, v263))
          << amx;
    // Fixed in 3.4: the forced policy may take it; the automatic rule still not (unmeasured).
    EXPECT_TRUE(take_binary_join(ResidualJoin::binary, "brgconv_1x1:avx512_core_amx_int8", amx,
                                 big, v34));
    EXPECT_FALSE(take_binary_join(ResidualJoin::automatic, "brgconv_1x1:avx512_core_amx_int8",
                                  amx, big, v34));
  }
  for (const char* other : {"jit_int8_1x1:avx512_core_vnni", "jit_1x1:avx512_core_bf16",
                            "brgconv_1x1:avx512_core_amx_int8", "jit_uni_int8_1x1:avx2",
                            "jit_1x1:avx512_core", "ref_int8:any", "unknown"})
    EXPECT_FALSE(binary_join_kernel_wrong(other, v263)) << other;
  // The AVX-512 EPYCs' measured case: large destinations only, same ISA, no binary form = sum.
  const char* sum_vnni = "brgconv_1x1:avx512_core_vnni";
  EXPECT_TRUE(take_binary_join(ResidualJoin::automatic, sum_vnni,
                               "jit_int8_1x1:avx512_core_vnni", big, v263));
  EXPECT_FALSE(take_binary_join(ResidualJoin::automatic, sum_vnni,
                                "jit_int8_1x1:avx512_core_vnni", small, v263));
  EXPECT_FALSE(take_binary_join(ResidualJoin::automatic, sum_vnni, "jit_int8_1x1:avx512_core",
                                big, v263));
  EXPECT_FALSE(take_binary_join(ResidualJoin::automatic, "jit_int8_1x1:avx512_core_vnni",
                                "jit_int8_1x1:avx512_core_vnni", big, v263));
  EXPECT_FALSE(take_binary_join(ResidualJoin::automatic, sum_vnni, "", big, v263));
  EXPECT_FALSE(take_binary_join(ResidualJoin::binary, sum_vnni, "", big, v263));
  EXPECT_TRUE(take_binary_join(ResidualJoin::binary, "jit_uni_int8_1x1:avx2",
                               "jit_uni_int8_1x1:avx2", small, v263));
  EXPECT_FALSE(take_binary_join(ResidualJoin::sum, sum_vnni, "jit_int8_1x1:avx512_core_vnni",
                                big, v263));
  // The version number of the library linked, as the rule reads it.
  const dnnl_version_t* v = dnnl_version();
  EXPECT_EQ(onednn::onednn_version_number(), v->major * 10000 + v->minor * 100 + v->patch);
}

/// The conv executions in oneDNN's verbose lines of `eng`'s first run on `x` whose post-ops
/// include a binary add.
int binary_add_convs(InferenceEngine& eng, const Tensor& x, Tensor* logits) {
  dnnl::set_verbose(2);
  ::testing::internal::CaptureStdout();
  *logits = eng.run(x);
  std::fflush(stdout);
  dnnl::set_verbose(0);
  const std::string log = ::testing::internal::GetCapturedStdout();
  int n = 0;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    n += line.find("onednn_verbose,exec") == 0 && line.find(",convolution,") != std::string::npos &&
         line.find("binary_add") != std::string::npos;
  return n;
}

// A whole ResNet-50 engine, bf16 and INT8, with every shortcut joined by the binary add
// against every one by the sum: the same logits within the precision's rounding, and the
// binary path in use (oneDNN's verbose lines name the post-op); a batch-invariant engine (rn50
// serve's) keeps the sum whatever the policy.
TEST(ConvEpilogue, ResNet50EnginesAgreeWithEitherJoin) {
  const InferenceProgram p = random_program("resnet50", 10, 61, 0.3f);
  const Tensor x = random_images(2, 64, 62);
  CalibrationConfig cc;
  Calibrator cal(p, cc);
  cal.add(x);
  InferenceProgram q = p;
  q.value_absmax = cal.value_absmax();
  for (const char* precision : {"bf16", "int8"}) {
    if (std::string(precision) == "bf16" && !cpu_has_bf16()) continue;
    EngineOptions o;
    o.precision = precision;
    const InferenceProgram& prog = std::string(precision) == "int8" ? q : p;
    Tensor with_sum, with_binary;
    {
      const JoinPolicy j(ResidualJoin::sum);
      with_sum = make_inference_engine(prog, o)->run(x);
    }
    {
      const JoinPolicy j(ResidualJoin::binary);
      auto eng = make_inference_engine(prog, o);
      // ResNet-50's 16 blocks each add a shortcut in their last 1x1 conv.
      const int binary_convs = binary_add_convs(*eng, x, &with_binary);
      if (cpu_has_avx512()) {
        EXPECT_EQ(binary_convs, 16) << precision;
      }
      EngineOptions inv = o;
      inv.batch_invariant = true;
      Tensor unused;
      EXPECT_EQ(binary_add_convs(*make_inference_engine(prog, inv), x, &unused), 0)
          << precision << ": a batch-invariant engine joined by a binary add";
    }
    const double rel = rel_l2(with_binary, with_sum);
    std::printf("resnet50 %s: binary add vs sum post-op logits, relative L2 %.2e\n", precision,
                rel);
    EXPECT_LT(rel, std::string(precision) == "int8" ? 2e-2 : 1e-2) << precision;
  }
}

// The automatic rule: the binary add for a large destination (ResNet-50's first-stage
// expansion at batch 32, 51 MiB in bf16) exactly where oneDNN's sum form is brgconv_1x1
// without AMX and its binary form a jit 1x1 kernel of the same instruction set; the sum for a
// destination that stays in the caches (batch 1), and for f32 destinations always.
TEST(ConvEpilogue, AutomaticRuleTakesTheBinaryAddOnlyForLargeBrgemmDestinations) {
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  std::vector<dt> types = {dt::u8, dt::f32};
  if (cpu_has_bf16()) types.push_back(dt::bf16);
  for (dt t : types) {
    for (int64_t n : {1, 32}) {
      const dt w = t == dt::u8 ? dt::s8 : t;
      const memory::desc src({n, 64, 56, 56}, t, tag::nhwc), dst({n, 256, 56, 56}, t, tag::nhwc),
          w_any({256, 64, 1, 1}, w, tag::any), b_md({256}, dt::f32, tag::x);
      const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference,
                                              dnnl::algorithm::convolution_direct, src, w_any,
                                              b_md, dst, {1, 1}, {0, 0}, {0, 0});
      onednn::ConvEpilogue e;
      e.residual = true;
      e.residual_md = dst;
      e.tail = dnnl::algorithm::eltwise_relu;
      if (t == dt::u8) e.output_scales.assign(256, 0.01f);
      const onednn::EpilogueConv got = onednn::make_epilogue_conv(d, e, eng);
      // What the rule looks at, found here on its own.
      const std::string sum_impl = got.binary_post_op < 0 ? got.pd.impl_info_str() : "";
      std::string bin_impl;
      {
        const JoinPolicy j(ResidualJoin::binary);
        const onednn::EpilogueConv b = onednn::make_epilogue_conv(d, e, eng);
        if (b.binary_post_op >= 0) bin_impl = b.pd.impl_info_str();
      }
      std::string sum_form;
      {
        const JoinPolicy j(ResidualJoin::sum);
        sum_form = onednn::make_epilogue_conv(d, e, eng).pd.impl_info_str();
      }
      const auto isa = [](const std::string& s) { return s.substr(s.find(':') + 1); };
      const bool expect_binary =
          t != dt::f32 && n == 32 && sum_form.rfind("brgconv_1x1:", 0) == 0 &&
          sum_form.find("amx") == std::string::npos && bin_impl.rfind("jit_", 0) == 0 &&
          bin_impl.find("1x1") != std::string::npos && isa(bin_impl) == isa(sum_form);
      EXPECT_EQ(got.binary_post_op >= 0, expect_binary)
          << memory::data_type_size(t) << "-byte destination, batch " << n << ": sum form "
          << sum_form << ", binary form " << bin_impl;
      if (n == 1 || t == dt::f32) {
        EXPECT_EQ(got.binary_post_op, -1);
      }
    }
  }
}

}  // namespace
}  // namespace rn50
