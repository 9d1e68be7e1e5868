// Checkpoints: round trip of params, running stats, num_batches_tracked, momentum and state;
// atomicity (state.json last, stale state removed, no temp files); epoch-folder resolution;
// pretrained weights (shape errors naming the key, dtype conversion, arch inference).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>

#include "core/check.h"
#include "core/fileio.h"
#include "core/safetensors.h"
#include "model/weights.h"
#include "rn50/backend.h"
#include "rn50/model.h"
#include "test_train_util.h"
#include "train/checkpoint.h"
#include "model/input_stage.h"
#include "krsc_ref_backend.h"
#include "train/optimizer.h"

using namespace rn50;
namespace fs = std::filesystem;
using rn50_test::TempDir;

namespace {

std::unique_ptr<ResNet> small_model(Backend& be, int classes, uint64_t seed) {
  ModelOptions mo;
  mo.num_classes = classes;
  mo.layout = Layout::NHWC;
  auto m = std::make_unique<ResNet>(be, arch_from_name("resnet18"), mo);
  m->init(seed);
  return m;
}

// One training forward on random pixels: moves running stats and num_batches_tracked.
void perturb_buffers(Backend& be, ResNet& m) {
  Batch b;
  b.images = Tensor::empty({2, 3, 32, 32}, DType::u8, Layout::NHWC);
  std::mt19937 g(7);
  for (int64_t i = 0; i < b.images.numel(); ++i) b.images.data_as<uint8_t>()[i] = g() & 0xff;
  b.labels = Tensor::zeros({2}, DType::i32);
  b.size = 2;
  InputStage in(be, Layout::NHWC, DType::f32, m.options().num_classes, 1);
  in.load(b);
  m.forward(in.x(), true);
  m.forward(in.x(), true);
}

Tensor random_slab(Backend& be, int64_t n, uint32_t seed) {
  Tensor h = Tensor::empty({n}, DType::f32);
  std::mt19937 g(seed);
  std::normal_distribution<float> nd;
  for (int64_t i = 0; i < n; ++i) h.data_as<float>()[i] = nd(g);
  Tensor d = be.alloc({n}, DType::f32);
  be.copy(h, d);
  return d;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> v;
  for (auto& e : fs::directory_iterator(dir)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

CheckpointState some_state() {
  CheckpointState st;
  st.epoch = 3;
  st.global_step = 48;
  st.next_lr = 0.0123;
  st.steps_per_epoch = 12;
  st.seed = 42;
  st.arch = "resnet18";
  st.classes = {"n01440764", "n02102040", "n02979186", "n03000684", "n03028079"};
  st.config = {{"batch_size", 8}, {"lr", 0.256}};
  st.version = "0.1.0";
  return st;
}

}  // namespace

TEST(TrainCheckpoint, RoundTripParamsBuffersMomentumState) {
  auto be = make_backend("onednn");
  auto a = small_model(*be, 5, 1);
  perturb_buffers(*be, *a);
  SgdOptimizer oa(*be, *a, {});
  Tensor mom = random_slab(*be, a->num_params(), 11);
  be->copy(mom, oa.momentum());
  TempDir tmp("ckpt");
  const fs::path dir = tmp.path / "resnet18" / "3";
  save_checkpoint(dir.string(), *a, oa, some_state());
  EXPECT_EQ(listing(dir),
            (std::vector<std::string>{"model.safetensors", "optimizer.safetensors", "state.json"}));

  auto b = small_model(*be, 5, 2);
  SgdOptimizer ob(*be, *b, {});
  CheckpointState st = load_checkpoint(dir.string(), *b, ob);
  const Tensor& mom2 = ob.momentum();
  EXPECT_EQ(st.epoch, 3);
  EXPECT_EQ(st.global_step, 48);
  EXPECT_DOUBLE_EQ(st.next_lr, 0.0123);
  EXPECT_EQ(st.steps_per_epoch, 12);
  EXPECT_EQ(st.seed, 42u);
  EXPECT_EQ(st.arch, "resnet18");
  EXPECT_EQ(st.classes, some_state().classes);
  EXPECT_EQ(st.config["batch_size"], 8);
  EXPECT_EQ(st.version, "0.1.0");

  auto sa = a->state_dict(), sb = b->state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  bool saw_nbt = false;
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    EXPECT_TRUE(bitwise_equal(sa[i].second, sb[i].second)) << sa[i].first;
    if (sa[i].first == "bn1.num_batches_tracked") {
      saw_nbt = true;
      EXPECT_EQ(*sb[i].second.data_as<int64_t>(), 2);
    }
  }
  EXPECT_TRUE(saw_nbt);
  EXPECT_TRUE(bitwise_equal(to_host(*be, mom), to_host(*be, mom2)));

  // The optimizer file is keyed by parameter name, each slice of the momentum slab.
  SafeTensorsFile of = load_safetensors((dir / "optimizer.safetensors").string());
  Tensor hm = to_host(*be, mom);
  for (const ParamInfo& p : a->params()) {
    ASSERT_TRUE(of.tensors.count(p.name)) << p.name;
    EXPECT_EQ(std::memcmp(of.tensors[p.name].data(), hm.data_as<float>() + p.offset,
                          static_cast<size_t>(p.numel()) * 4),
              0)
        << p.name;
  }
  // model.safetensors holds torchvision's keys, including num_batches_tracked as I64.
  SafeTensorsFile mf = load_safetensors((dir / "model.safetensors").string());
  ASSERT_TRUE(mf.tensors.count("layer1.0.bn2.num_batches_tracked"));
  EXPECT_EQ(mf.tensors["layer1.0.bn2.num_batches_tracked"].dtype(), DType::i64);
  EXPECT_EQ(mf.tensors["fc.weight"].shape(), (std::vector<int64_t>{5, 512}));
}

TEST(TrainCheckpoint, FailedSaveLeavesNoCompleteMarkerAndNoTempFiles) {
  auto be = make_backend("onednn");
  auto a = small_model(*be, 3, 1);
  SgdOptimizer oa(*be, *a, {});
  be->copy(random_slab(*be, a->num_params(), 3), oa.momentum());
  TempDir tmp("ckpt_atomic");
  const fs::path dir = tmp.path / "0";
  save_checkpoint(dir.string(), *a, oa, some_state());
  ASSERT_TRUE(fs::exists(dir / "state.json"));
  // Rewriting the folder fails half-way (optimizer.safetensors cannot be replaced: it is now a
  // non-empty directory). The stale state.json must be gone, so the folder no longer looks
  // complete, and no temp file may be left behind.
  fs::remove(dir / "optimizer.safetensors");
  fs::create_directories(dir / "optimizer.safetensors" / "block");
  EXPECT_THROW(save_checkpoint(dir.string(), *a, oa, some_state()), Error);
  EXPECT_FALSE(fs::exists(dir / "state.json"));
  for (auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  // resolve_checkpoint_dir(auto) skips the incomplete folder.
  EXPECT_THROW(resolve_checkpoint_dir(tmp.str(), "auto"), Error);
  EXPECT_THROW(resolve_checkpoint_dir(tmp.str(), "0"), Error);
  // A training run's "auto" (none_ok) finds nothing to resume: "" (start from epoch 0), also
  // through the <checkpoint-dir>/<arch> level and in an empty folder; an explicit epoch throws.
  EXPECT_EQ(resolve_checkpoint_dir(tmp.str(), "auto", "", /*none_ok=*/true), "");
  fs::create_directories(tmp.path / "nested" / "resnet18" / "0");
  EXPECT_EQ(resolve_checkpoint_dir((tmp.path / "nested").string(), "auto", "resnet18", true), "");
  EXPECT_THROW(resolve_checkpoint_dir(tmp.str(), "0", "", true), Error);
}

TEST(TrainCheckpoint, ResolveEpochFolder) {
  TempDir tmp("ckpt_resolve");
  for (const char* e : {"0", "1", "2", "10", "foo", "7x"}) {
    fs::create_directories(tmp.path / e);
    if (std::string(e) != "2") std::ofstream(tmp.path / e / "state.json") << "{}";
  }
  EXPECT_EQ(fs::path(resolve_checkpoint_dir(tmp.str(), "auto")).filename(), "10");
  EXPECT_EQ(fs::path(resolve_checkpoint_dir(tmp.str(), "1")).filename(), "1");
  // Pointing directly at an epoch folder.
  EXPECT_EQ(resolve_checkpoint_dir((tmp.path / "0").string(), "auto"), (tmp.path / "0").string());
  try {
    resolve_checkpoint_dir(tmp.str(), "2");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--last-epoch-of-checkpoint 2"), std::string::npos)
        << e.what();
  }
  try {
    resolve_checkpoint_dir(tmp.str(), "latest");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'latest'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(resolve_checkpoint_dir((tmp.path / "missing").string(), "auto"), Error);
}

TEST(TrainCheckpoint, PretrainedParamsShapeErrorsAndConversion) {
  auto be = make_backend("onednn");
  auto a = small_model(*be, 5, 1);
  perturb_buffers(*be, *a);
  TempDir tmp("pretrained");
  // A torchvision-style file: F64 params (converted on load), extra key, no num_batches_tracked.
  std::vector<std::pair<std::string, Tensor>> sd;
  for (auto& [k, t] : a->state_dict()) {
    if (k.find("num_batches_tracked") != std::string::npos) continue;
    Tensor d = Tensor::empty(t.shape(), DType::f64);
    for (int64_t i = 0; i < t.numel(); ++i) d.data_as<double>()[i] = t.data_as<float>()[i];
    sd.emplace_back(k, d);
  }
  sd.emplace_back("extra.unused", Tensor::zeros({2}, DType::f32));
  const std::string file = (tmp.path / "w.safetensors").string();
  save_safetensors(file, sd);

  auto b = small_model(*be, 5, 9);
  load_pretrained_params(file, *b);
  auto sa = a->state_dict(), sb = b->state_dict();
  for (size_t i = 0; i < sa.size(); ++i) {
    if (sa[i].first.find("num_batches_tracked") == std::string::npos) {
      EXPECT_TRUE(bitwise_equal(sa[i].second, sb[i].second)) << sa[i].first;
    }
  }

  // Different class count (fine-tuning): the backbone is loaded, fc keeps the model's own
  // initialisation, and the answer says so.
  auto c = small_model(*be, 7, 1);
  auto c_init = small_model(*be, 7, 1);  // the same seed: c's fc before loading
  const std::string note = load_pretrained_params(file, *c);
  EXPECT_NE(note.find("fc: 5 -> 7 classes, re-initialised"), std::string::npos) << note;
  {
    auto sc = c->state_dict(), si = c_init->state_dict();
    std::map<std::string, Tensor> want(sa.begin(), sa.end());
    for (size_t i = 0; i < sc.size(); ++i) {
      const std::string& k = sc[i].first;
      if (k.find("num_batches_tracked") != std::string::npos) continue;
      if (k == "fc.weight" || k == "fc.bias")
        EXPECT_TRUE(bitwise_equal(sc[i].second, si[i].second)) << k << " re-initialised";
      else
        EXPECT_TRUE(bitwise_equal(sc[i].second, want.at(k))) << k << " loaded";
    }
  }
  EXPECT_EQ(load_pretrained_params(file, *b), "");  // the same class count: nothing to say
  // --strict-pretrained (and evaluation): the error names the key and the --num-of-class that
  // fits.
  try {
    load_pretrained_params(file, *c, /*strict_classes=*/true);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'fc.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--num-of-class 5"), std::string::npos) << msg;
  }
  // A missing key is named.
  sd.erase(std::remove_if(sd.begin(), sd.end(),
                          [](auto& kv) { return kv.first == "layer2.1.bn1.running_var"; }),
           sd.end());
  save_safetensors(file, sd);
  try {
    load_pretrained_params(file, *b);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer2.1.bn1.running_var"), std::string::npos)
        << e.what();
  }
}

TEST(TrainCheckpoint, InferArchFromKeys) {
  auto be = make_backend("onednn");
  for (const char* name : {"resnet18", "resnet50"}) {
    ModelOptions mo;
    mo.num_classes = 4;
    ResNet m(*be, arch_from_name(name), mo);
    std::map<std::string, Tensor> sd;
    for (const ParamInfo& p : m.params()) sd[p.name] = Tensor::zeros({1}, DType::f32);
    EXPECT_EQ(infer_arch(sd, "x"), name);
  }
  EXPECT_THROW(infer_arch({}, "empty.safetensors"), Error);
}

TEST(TrainCheckpoint, HalfAndBf16Conversion) {
  Tensor h = Tensor::empty({4}, DType::f16);
  const uint16_t hv[4] = {0x3c00, 0xc000, 0x0001, 0x7bff};  // 1, -2, 2^-24, 65504
  std::memcpy(h.data(), hv, 8);
  Tensor f = to_f32(h, "h");
  EXPECT_EQ(f.data_as<float>()[0], 1.f);
  EXPECT_EQ(f.data_as<float>()[1], -2.f);
  EXPECT_EQ(f.data_as<float>()[2], std::ldexp(1.f, -24));
  EXPECT_EQ(f.data_as<float>()[3], 65504.f);
  Tensor b = Tensor::empty({2}, DType::bf16);
  const uint16_t bv[2] = {0x3fc0, 0xbf80};  // 1.5, -1
  std::memcpy(b.data(), bv, 4);
  Tensor g = to_f32(b, "b");
  EXPECT_EQ(g.data_as<float>()[0], 1.5f);
  EXPECT_EQ(g.data_as<float>()[1], -1.f);
}

namespace rn50 {
namespace {

// The fp16 loss-scale state survives state.json, and is absent (0) for other runs.
TEST(TrainCheckpoint, LossScaleStateRoundTrip) {
  CheckpointState s;
  s.epoch = 3;
  s.global_step = 400;
  s.next_lr = 0.1;
  s.steps_per_epoch = 100;
  s.loss_scale = 32768;
  s.skipped_steps = 7;
  const CheckpointState r = CheckpointState::from_json(nlohmann::json::parse(s.to_json().dump()), "t");
  EXPECT_EQ(r.loss_scale, 32768);
  EXPECT_EQ(r.skipped_steps, 7);
  s.loss_scale = 0;
  const nlohmann::ordered_json j = s.to_json();
  EXPECT_FALSE(j.contains("loss_scale")) << "fp32/bf16 runs write no loss scale";
  EXPECT_EQ(CheckpointState::from_json(nlohmann::json::parse(j.dump()), "t").loss_scale, 0);
}

}  // namespace
}  // namespace rn50

namespace rn50 {
namespace {

// A backend that keeps conv weights in KRSC (like CUDA): slabs hold KRSC, but the model's
// state_dict, the optimizer's momentum file and loading both speak torchvision's OIHW, so a
// checkpoint moves between backends unchanged.
TEST(TrainCheckpoint, KrscSlabsSaveAndLoadInTorchvisionLayout) {
  auto ref = make_backend("ref");
  KrscRefBackend krsc;
  ModelOptions mo;
  mo.num_classes = 5;
  mo.layout = Layout::NHWC;
  const ArchSpec arch = arch_from_name("resnet18");
  ResNet k(krsc, arch, mo), r(*ref, arch, mo);
  k.init(3);
  r.init(3);
  ASSERT_EQ(k.weight_layout(), Layout::NHWC);
  ASSERT_EQ(r.weight_layout(), Layout::NCHW);
  SgdOptimizer ok(krsc, k, {}), orr(*ref, r, {});
  std::map<std::string, Tensor> mom;
  std::mt19937 g(5);
  std::normal_distribution<float> nd;
  for (const ParamInfo& p : k.params()) {
    Tensor t = Tensor::empty(p.shape, DType::f32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = nd(g);
    mom[p.name] = t;
  }
  ok.load_state_dict(mom, "test");
  orr.load_state_dict(mom, "test");
  // The slabs differ (KRSC vs OIHW conv entries)...
  EXPECT_FALSE(bitwise_equal(to_host(krsc, ok.momentum()), to_host(*ref, orr.momentum())));
  EXPECT_FALSE(bitwise_equal(to_host(krsc, k.param_slab()), to_host(*ref, r.param_slab())));
  // ... their torchvision views do not.
  auto sk = k.state_dict(), sr = r.state_dict();
  for (size_t i = 0; i < sk.size(); ++i)
    EXPECT_TRUE(bitwise_equal(sk[i].second, sr[i].second)) << sk[i].first;
  auto mk = ok.state_dict();
  for (const auto& [name, t] : mk) EXPECT_TRUE(bitwise_equal(t, mom[name])) << name;

  TempDir tmp("ckpt_krsc");
  save_checkpoint((tmp.path / "k").string(), k, ok, some_state());
  save_checkpoint((tmp.path / "r").string(), r, orr, some_state());
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    SafeTensorsFile a = load_safetensors((tmp.path / "k" / f).string());
    SafeTensorsFile b = load_safetensors((tmp.path / "r" / f).string());
    ASSERT_EQ(a.tensors.size(), b.tensors.size()) << f;
    for (const auto& [name, t] : a.tensors)
      EXPECT_TRUE(bitwise_equal(t, b.tensors.at(name))) << f << ": " << name;
  }
  // The KRSC checkpoint loads into an OIHW model, and the other way round.
  ResNet r2(*ref, arch, mo);
  SgdOptimizer or2(*ref, r2, {});
  load_checkpoint((tmp.path / "k").string(), r2, or2);
  EXPECT_TRUE(bitwise_equal(to_host(*ref, or2.momentum()), to_host(*ref, orr.momentum())));
  EXPECT_TRUE(bitwise_equal(to_host(*ref, r2.param_slab()), to_host(*ref, r.param_slab())));
  ResNet k2(krsc, arch, mo);
  SgdOptimizer ok2(krsc, k2, {});
  load_checkpoint((tmp.path / "r").string(), k2, ok2);
  EXPECT_TRUE(bitwise_equal(to_host(krsc, ok2.momentum()), to_host(krsc, ok.momentum())));
  EXPECT_TRUE(bitwise_equal(to_host(krsc, k2.param_slab()), to_host(krsc, k.param_slab())));
}

}  // namespace
}  // namespace rn50

TEST(TrainCheckpoint, DamagedFilesAreNamedNotLoaded) {
  auto be = make_backend("onednn");
  auto a = small_model(*be, 5, 1);
  SgdOptimizer oa(*be, *a, {});
  TempDir tmp("ckpt_damaged");
  const fs::path dir = tmp.path / "resnet18" / "3";
  save_checkpoint(dir.string(), *a, oa, some_state());
  const CheckpointState st = read_checkpoint_state(dir.string());
  ASSERT_EQ(st.files.size(), 2u);  // size and CRC-32C of both files recorded in state.json
  EXPECT_EQ(st.files.at("model.safetensors").bytes,
            int64_t(fs::file_size(dir / "model.safetensors")));
  auto b = small_model(*be, 5, 2);
  SgdOptimizer ob(*be, *b, {});
  auto error_of = [&](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    SCOPED_TRACE(file);
    const std::string path = (dir / file).string(), good = read_file(path);
    std::string bad = good;
    bad[bad.size() - 3] = static_cast<char>(bad[bad.size() - 3] ^ 0x40);  // a weight's bit
    write_file_atomic(path, bad);
    std::string e = error_of([&] { load_checkpoint(dir.string(), *b, ob); });
    EXPECT_NE(e.find(path), std::string::npos) << e;
    EXPECT_NE(e.find("damaged"), std::string::npos) << e;
    write_file_atomic(path, good.substr(0, good.size() / 2));  // truncated
    e = error_of([&] { load_checkpoint(dir.string(), *b, ob); });
    EXPECT_NE(e.find("damaged"), std::string::npos) << e;
    if (std::string(file) == "model.safetensors") {  // --from-pretrained-params <epoch folder>
      e = error_of([&] { load_pretrained_params(dir.string(), *b); });
      EXPECT_NE(e.find("damaged"), std::string::npos) << e;
    }
    write_file_atomic(path, good);
  }
  EXPECT_NO_THROW(load_checkpoint(dir.string(), *b, ob));
  // A state.json of an older rn50, without "files", still loads (nothing to check against).
  nlohmann::json j = nlohmann::json::parse(read_file((dir / "state.json").string()));
  j.erase("files");
  write_file_atomic((dir / "state.json").string(), j.dump());
  EXPECT_NO_THROW(load_checkpoint(dir.string(), *b, ob));
  j["files"] = {{"model.safetensors", {{"bytes", -1}, {"crc32c", "zz"}}}};
  write_file_atomic((dir / "state.json").string(), j.dump());
  EXPECT_NE(error_of([&] { read_checkpoint_state(dir.string()); }).find("files.model.safetensors"),
            std::string::npos);
}
