// INT8 ResNet-50 engines at 224 px and batch 32 (the size where the CPU engine's automatic rule
// joins the large shortcuts by a binary add, infer/conv_epilogue.h), join by join: every residual
// join's output codes against a float64 reference of that join computed from the engine's own
// input and shortcut codes (so that a code rounded the other way upstream does not cascade into
// the comparison), for the automatic rule, the sum post-op everywhere and the binary add
// everywhere oneDNN builds it; the joins the automatic engine added by a binary post-op are
// exactly those the rule picks from what oneDNN offers; the logits of the three engines agree.
// Checked images: the first two and the last of the batch (a kernel that writes past one image
// into the next, as oneDNN 2.6's AMX 1x1 kernel did, shows in the second; one that writes past
// the tensor, in the last).
// The same test runs again at every lower instruction set the host allows, in child processes
// with ONEDNN_MAX_CPU_ISA (oneDNN reads it once per process), so that one CI machine checks the
// kernels of the CPU classes below it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <dnnl.hpp>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "infer/conv_epilogue.h"
#include "infer/engine_impl.h"
#include "infer/quantize.h"
#include "infer_test_util.h"
#include "rn50/inference.h"
#include "sanitizer_build.h"
#include "test_train_util.h"

namespace rn50 {
namespace {

using onednn::ResidualJoin;
using Type = ObservedValue::Type;

/// The instruction sets oneDNN 2.6 can be capped at (ONEDNN_MAX_CPU_ISA), highest first.
struct IsaLevel {
  const char* name;  ///< ONEDNN_MAX_CPU_ISA's spelling
  dnnl::cpu_isa isa;
};
const IsaLevel kLevels[] = {
    {"AVX512_CORE_AMX", dnnl::cpu_isa::avx512_core_amx},
    {"AVX512_CORE_BF16", dnnl::cpu_isa::avx512_core_bf16},
    {"AVX512_CORE_VNNI", dnnl::cpu_isa::avx512_core_vnni},
    {"AVX512_CORE", dnnl::cpu_isa::avx512_core},
    {"AVX2_VNNI", dnnl::cpu_isa::avx2_vnni},
    {"AVX2", dnnl::cpu_isa::avx2},
    {"AVX", dnnl::cpu_isa::avx},
    {"SSE41", dnnl::cpu_isa::sse41},
};

/// ONEDNN_MAX_CPU_ISA's name of oneDNN's effective instruction set here, or its number.
std::string effective_isa_name() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  for (const IsaLevel& l : kLevels)
    if (l.isa == isa) return l.name;
  return std::to_string(static_cast<unsigned>(isa));
}

/// Whether instruction set `a` includes all of `b` (oneDNN's cpu_isa values are bit sets).
bool includes(dnnl::cpu_isa a, dnnl::cpu_isa b) {
  return (static_cast<unsigned>(a) & static_cast<unsigned>(b)) == static_cast<unsigned>(b);
}

/// A residual join of the program: the conv op, and the values it reads and writes.
struct Join {
  int op = 0;
  int in = 0, res = 0, out = 0;
};

std::vector<Join> joins_of(const InferenceProgram& p) {
  std::vector<Join> j;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const InferOp& op = p.ops[i];
    if (op.kind == InferOp::Kind::conv && op.residual >= 0)
      j.push_back({static_cast<int>(i), op.input, op.residual, op.output});
  }
  return j;
}

/// One value's codes as an engine wrote them, for the checked images (NHWC, image by image).
struct Captured {
  Type type = Type::f32;
  float scale = 0.f;
  int64_t per_image = 0;                 ///< elements per image
  std::vector<std::vector<int>> images;  ///< [checked image][element]
};

/// What one engine run gave: the logits, the captured join values by value index, and the
/// oneDNN verbose lines of its convolutions with a shortcut, in execution order.
struct EngineRun {
  Tensor logits;
  std::map<int, Captured> values;
  struct JoinExec {
    std::string impl;
    bool binary = false;
    size_t dst_bytes = 0;
  };
  std::vector<JoinExec> joins;
};

/// Builds an INT8 engine of `p` under join policy `policy`, runs `x` once, capturing the join
/// values of images `checked` (observer) and the joins' oneDNN verbose lines.
EngineRun run_engine(const InferenceProgram& p, ResidualJoin policy, const Tensor& x,
                     const std::vector<int64_t>& checked) {
  std::vector<bool> wanted(p.producer.size(), false);
  for (const Join& j : joins_of(p)) wanted[j.in] = wanted[j.res] = wanted[j.out] = true;
  EngineRun r;
  const int64_t n = x.n();
  onednn::set_residual_join(policy);
  auto eng = make_cpu_engine(p, EnginePrecision::int8, [&](const ObservedValue& o) {
    if (o.value >= static_cast<int>(wanted.size()) || !wanted[o.value]) return;
    Captured c;
    c.type = o.type;
    c.scale = o.scale;
    c.per_image = o.count / n;
    for (int64_t img : checked) {
      std::vector<int>& dst = c.images.emplace_back(static_cast<size_t>(c.per_image));
      for (int64_t e = 0; e < c.per_image; ++e) {
        const int64_t i = img * c.per_image + e;
        dst[static_cast<size_t>(e)] = o.type == Type::u8   ? static_cast<const uint8_t*>(o.data)[i]
                                      : o.type == Type::s8 ? static_cast<const int8_t*>(o.data)[i]
                                                           : 1 << 30;  // not codes
      }
    }
    r.values[o.value] = std::move(c);
  });
  dnnl::set_verbose(2);
  ::testing::internal::CaptureStdout();
  r.logits = eng->run(x);  // the plan is built here, under `policy`
  std::fflush(stdout);
  dnnl::set_verbose(0);
  const std::string log = ::testing::internal::GetCapturedStdout();
  onednn::set_residual_join(std::nullopt);
  // onednn_verbose,exec,cpu,convolution,IMPL,prop,MDS,ATTRS,alg:...,PROBLEM,ms
  const std::regex problem("mb(\\d+)_ic\\d+oc(\\d+)_ih\\d+oh(\\d+).*_iw\\d+ow(\\d+)");
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("onednn_verbose,exec,cpu,convolution,", 0) != 0) continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string s; std::getline(ss, s, ',');) f.push_back(s);
    if (f.size() < 10) continue;
    const bool sum = f[7].find("sum") != std::string::npos,
               binary = f[7].find("binary_add") != std::string::npos;
    if (!sum && !binary) continue;
    std::smatch m;
    EngineRun::JoinExec e{f[4], binary, 0};
    if (std::regex_search(f[9], m, problem))  // u8 destination: one byte per element
      e.dst_bytes = std::stoull(m[1]) * std::stoull(m[2]) * std::stoull(m[3]) * std::stoull(m[4]);
    r.joins.push_back(e);
  }
  return r;
}

/// Whether each value of `p` is the output of a ReLU (stored as u8 by the INT8 engine).
std::vector<bool> nonneg_values(const InferenceProgram& p) {
  std::vector<bool> nn(p.producer.size(), false);
  for (const InferOp& op : p.ops)
    nn[static_cast<size_t>(op.output)] =
        op.kind == InferOp::Kind::conv ? op.relu : nn[static_cast<size_t>(op.input)];
  return nn;
}

/// How one join of one engine compares with the float64 reference.
struct JoinCheck {
  int64_t elements = 0, off_by_one = 0, worse = 0;
  std::string first_worse;  ///< where the first difference over one code is
};

/// The float64 reference of join `j` on the engine's captured input and shortcut codes, against
/// the engine's output codes, image by image. The INT8 engine's arithmetic (infer/quantize.h,
/// engine_cpu.cpp): weights per output channel on codes of weight_code_max(false) steps;
/// out = round_half_even(s_in w_k / s_out (acc + b_k / (s_in w_k)) + s_res / s_out res), ReLU'd,
/// saturated to u8 (or s8 without ReLU).
JoinCheck check_join(const InferenceProgram& p, const Join& j, const EngineRun& r,
                     const std::vector<bool>& nonneg) {
  const InferOp& op = p.ops[static_cast<size_t>(j.op)];
  const Captured &in = r.values.at(j.in), &res = r.values.at(j.res), &out = r.values.at(j.out);
  const int64_t C = op.conv.in_channels, K = op.conv.out_channels, R = op.conv.kernel,
                st = op.conv.stride, pad = op.conv.pad;
  const auto side = [](int64_t plane) {  // square planes (ResNet on square images)
    return static_cast<int64_t>(std::lround(std::sqrt(double(plane))));
  };
  const int64_t H = side(in.per_image / C), OH = side(out.per_image / K);
  EXPECT_EQ(H * H * C, in.per_image) << op.name;
  EXPECT_EQ(OH, (H + 2 * pad - R) / st + 1) << op.name;
  const auto scale_of = [&](int v) {
    return quant::activation_scale(p.value_absmax.at(static_cast<size_t>(v)),
                                   nonneg[static_cast<size_t>(v)]);
  };
  const double s_in = scale_of(j.in), s_res = scale_of(j.res), s_out = scale_of(j.out);
  // The engine's codes carry the scales the INT8 rules give (rn50/inference.h).
  EXPECT_EQ(in.scale, float(s_in)) << op.name;
  EXPECT_EQ(res.scale, float(s_res)) << op.name;
  EXPECT_EQ(out.scale, float(s_out)) << op.name;
  EXPECT_EQ(in.type, nonneg[j.in] ? Type::u8 : Type::s8) << op.name;
  EXPECT_EQ(out.type, op.relu ? Type::u8 : Type::s8) << op.name;
  const std::vector<float> ws = quant::weight_scales(op.weight, quant::weight_code_max(false));
  const std::vector<int32_t> wq = quant::quantize(op.weight, K, ws, false);  // (K, C, R, R)
  // Weight codes as [r][s][c][k], so that the innermost loop runs over contiguous k.
  std::vector<int32_t> wt(wq.size());
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t a = 0; a < R * R; ++a)
        wt[static_cast<size_t>((a * C + c) * K + k)] =
            wq[static_cast<size_t>((k * C + c) * R * R + a)];
  const double lo = op.relu ? 0 : -128, hi = op.relu ? 255 : 127;
  JoinCheck jc;
  for (size_t img = 0; img < in.images.size(); ++img) {
    const std::vector<int>& x = in.images[img];
    std::vector<int64_t> acc(static_cast<size_t>(K));
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OH; ++ow) {
        std::fill(acc.begin(), acc.end(), 0);
        for (int64_t a = 0; a < R * R; ++a) {
          const int64_t ih = oh * st - pad + a / R, iw = ow * st - pad + a % R;
          if (ih < 0 || ih >= H || iw < 0 || iw >= H) continue;
          const int* xp = &x[static_cast<size_t>((ih * H + iw) * C)];
          for (int64_t c = 0; c < C; ++c) {
            const int v = xp[c];
            if (v == 0) continue;
            const int32_t* w = &wt[static_cast<size_t>((a * C + c) * K)];
            for (int64_t k = 0; k < K; ++k) acc[static_cast<size_t>(k)] += int64_t(v) * w[k];
          }
        }
        for (int64_t k = 0; k < K; ++k) {
          const auto e = static_cast<size_t>((oh * OH + ow) * K + k);
          const double sw = s_in * ws[static_cast<size_t>(k)];
          double v = sw / s_out * (double(acc[static_cast<size_t>(k)]) +
                                   double(op.bias.data_as<const float>()[k]) / sw) +
                     s_res / s_out * res.images[img][e];
          if (op.relu) v = std::max(v, 0.0);
          const double want = std::clamp(std::nearbyint(v), lo, hi);
          const double d = std::fabs(out.images[img][e] - want);
          ++jc.elements;
          jc.off_by_one += d == 1;
          if (d > 1 && jc.worse++ == 0)
            jc.first_worse = op.name + ": checked image " + std::to_string(img) + ", pixel " +
                             std::to_string(oh * OH + ow) + ", channel " + std::to_string(k) +
                             ": engine " + std::to_string(out.images[img][e]) + ", reference " +
                             std::to_string(want) + " (" + std::to_string(v) + ")";
        }
      }
  }
  return jc;
}

/// The whole check at this process's instruction set; prints one summary line.
void check_at_this_isa() {
  const int64_t n = 32, hw = 224;
  // In the sanitized build (test code at -O0) fewer images are checked.
  const std::vector<int64_t> checked =
      test::kAddressSanitizer ? std::vector<int64_t>{1, n - 1} : std::vector<int64_t>{0, 1, n - 1};
  const InferenceProgram fp = random_program("resnet50", 10, 67, 0.3f);
  CalibrationConfig cc;
  Calibrator cal(fp, cc);
  cal.add(random_images(2, hw, 68));
  InferenceProgram p = fp;
  p.value_absmax = cal.value_absmax();
  const Tensor x = random_images(n, hw, 69);
  const std::vector<bool> nonneg = nonneg_values(p);
  const std::vector<Join> joins = joins_of(p);
  ASSERT_EQ(joins.size(), 16u);

  const EngineRun sum = run_engine(p, ResidualJoin::sum, x, checked);
  const EngineRun bin = run_engine(p, ResidualJoin::binary, x, checked);
  const EngineRun autom = run_engine(p, ResidualJoin::automatic, x, checked);
  // Every join appears in each engine's verbose lines, in program order.
  for (const EngineRun* r : {&sum, &bin, &autom}) ASSERT_EQ(r->joins.size(), joins.size());
  int expect_binary = 0, took_binary = 0, forced_binary = 0;
  const int version = onednn::onednn_version_number();
  for (size_t i = 0; i < joins.size(); ++i) {
    EXPECT_FALSE(sum.joins[i].binary) << i;
    forced_binary += bin.joins[i].binary;
    // The rule, from what oneDNN offered each form (the sum engine's and the forced binary
    // engine's implementations), against what the automatic engine ran.
    const bool want = onednn::take_binary_join(
        ResidualJoin::automatic, sum.joins[i].impl, bin.joins[i].binary ? bin.joins[i].impl : "",
        sum.joins[i].dst_bytes, version);
    expect_binary += want;
    took_binary += autom.joins[i].binary;
    EXPECT_EQ(autom.joins[i].binary, want)
        << p.ops[static_cast<size_t>(joins[i].op)].name << ": sum form " << sum.joins[i].impl
        << ", binary form " << (bin.joins[i].binary ? bin.joins[i].impl : "none") << ", "
        << sum.joins[i].dst_bytes << " bytes";
  }
  // On the CPUs the rule was measured on (AVX-512 VNNI or BF16 without AMX) the large joins of
  // layer1 and layer2 (7 of 16 at batch 32) take the binary add: the path this test is for.
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  if ((isa == dnnl::cpu_isa::avx512_core_vnni || isa == dnnl::cpu_isa::avx512_core_bf16) &&
      version < 30400) {
    EXPECT_EQ(expect_binary, 7) << "the automatic rule's binary joins at batch 32";
  }
  // Join by join against the float64 reference.
  std::string table;
  for (const auto& [name, r] : {std::pair<const char*, const EngineRun*>{"sum", &sum},
                                {"binary", &bin},
                                {"automatic", &autom}}) {
    JoinCheck all;
    for (const Join& j : joins) {
      const JoinCheck jc = check_join(p, j, *r, nonneg);
      EXPECT_EQ(jc.worse, 0) << name << " engine, " << jc.worse << " codes more than one off; "
                             << jc.first_worse;
      all.elements += jc.elements;
      all.off_by_one += jc.off_by_one;
      all.worse += jc.worse;
    }
    // One-code differences only where the f32 arithmetic lands next to a rounding tie.
    EXPECT_LE(all.off_by_one, all.elements / 100000) << name;
    table += fmt::format(" {}: {} codes, {} one off, {} worse;", name, all.elements,
                         all.off_by_one, all.worse);
  }
  const double rel_bin = rel_l2(bin.logits, sum.logits),
               rel_auto = rel_l2(autom.logits, sum.logits);
  EXPECT_LT(rel_bin, 2e-2);
  EXPECT_LT(rel_auto, 2e-2);
  std::printf(
      "int8 joins at %s (oneDNN %d): binary joins automatic %d (rule %d), forced %d of 16;%s "
      "logits vs sum: binary %.2e, automatic %.2e\n",
      effective_isa_name().c_str(), version, took_binary, expect_binary, forced_binary,
      table.c_str(), rel_bin, rel_auto);

  // The comparison can fail: one code of a captured join output moved by two is reported.
  EngineRun planted = sum;
  Captured& o = planted.values.at(joins[5].out);
  int& code = o.images.back()[static_cast<size_t>(o.per_image / 2)];
  code = code > 127 ? code - 2 : code + 2;
  EXPECT_EQ(check_join(p, joins[5], planted, nonneg).worse, 1);
}

// At the host's instruction set; in a child of EveryLowerInstructionSet, at the one it names
// (RN50_INT8_JOINS_ISA, with oneDNN capped by ONEDNN_MAX_CPU_ISA).
TEST(Int8Joins, ResNet50Batch32AgreesWithTheReferenceJoinByJoin) {
  if (const char* want = std::getenv("RN50_INT8_JOINS_ISA")) {
    ASSERT_EQ(effective_isa_name(), want) << "ONEDNN_MAX_CPU_ISA did not take";
  }
  check_at_this_isa();
}

// The test above at every instruction set below the host's that the host has (oneDNN's levels
// from AMX down to SSE4.1), each in a process of its own.
TEST(Int8Joins, EveryLowerInstructionSet) {
  if (std::getenv("RN50_INT8_JOINS_ISA")) GTEST_SKIP() << "a child run";
  if (test::kAddressSanitizer)
    GTEST_SKIP() << "sanitized build: the host's instruction set only (the test code runs at -O0)";
  const dnnl::cpu_isa host = dnnl::get_effective_cpu_isa();
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  int ran = 0;
  std::string summary;
  for (const IsaLevel& l : kLevels) {
    if (l.isa == host || !includes(host, l.isa)) continue;
    std::string out;
    const int rc = rn50_test::run_command(
        std::string("ONEDNN_MAX_CPU_ISA=") + l.name + " RN50_INT8_JOINS_ISA=" + l.name + " " +
            rn50_test::sh_quote(exe) +
            " --gtest_filter=Int8Joins.ResNet50Batch32AgreesWithTheReferenceJoinByJoin",
        &out);
    EXPECT_EQ(rc, 0) << l.name << ":\n" << out;
    EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << l.name << ":\n" << out;
    const size_t at = out.find("int8 joins at ");
    summary += at == std::string::npos ? std::string(l.name) + ": no summary\n"
                                       : out.substr(at, out.find('\n', at) - at + 1);
    ++ran;
  }
  std::printf("host %s; %d lower instruction sets:\n%s", effective_isa_name().c_str(), ran,
              summary.c_str());
}

}  // namespace
}  // namespace rn50
