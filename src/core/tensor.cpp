#include "rn50/tensor.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "core/check.h"

namespace rn50 {

void fail_at(const char* file, int line, const std::string& msg) {
  const char* base = std::strrchr(file, '/');
  throw Error(msg, fmt::format("{}:{}", base ? base + 1 : file, line));
}

std::string error_text(const std::exception& e) {
  const auto* err = dynamic_cast<const Error*>(&e);
  const char* debug = std::getenv("RN50_DEBUG");
  if (err && !err->location().empty() && debug && *debug)
    return fmt::format("{} [at {}]", e.what(), err->location());
  return e.what();
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::f64: return 8;
    case DType::u8: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::f64: return "F64";
    case DType::u8: return "U8";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
  }
  return "?";
}

const char* layout_name(Layout l) { return l == Layout::NCHW ? "NCHW" : "NHWC"; }

Layout parse_layout(const std::string& s) {
  std::string u = s;
  std::transform(u.begin(), u.end(), u.begin(), [](unsigned char c) { return std::toupper(c); });
  if (u == "NCHW") return Layout::NCHW;
  if (u == "NHWC") return Layout::NHWC;
  RN50_FAIL("unknown data layout '{}' (expected NCHW or NHWC)", s);
}

std::string Device::str() const {
  return type == DeviceType::CPU ? std::string("cpu") : fmt::format("cuda:{}", index);
}

Storage::~Storage() {
  if (deleter && ptr) deleter(ptr);
}

static void free_host(void* p) { std::free(p); }

static int64_t count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    RN50_CHECK(d >= 0, "negative dimension {} in tensor shape", d);
    RN50_CHECK(!__builtin_mul_overflow(n, d, &n), "tensor shape too large (over 2^63 elements)");
  }
  return n;
}

Tensor Tensor::empty(std::vector<int64_t> shape, DType dtype, Layout layout) {
  size_t bytes = static_cast<size_t>(count(shape)) * dtype_size(dtype);
  size_t alloc = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, alloc);
  RN50_CHECK(p != nullptr, "out of host memory allocating {} bytes", alloc);
  auto s = std::make_shared<Storage>();
  s->ptr = p;
  s->bytes = alloc;
  s->deleter = free_host;
  return from_storage(std::move(s), 0, std::move(shape), dtype, layout);
}

Tensor Tensor::zeros(std::vector<int64_t> shape, DType dtype, Layout layout) {
  Tensor t = empty(std::move(shape), dtype, layout);
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::view(void* data, std::vector<int64_t> shape, DType dtype, Layout layout,
                    Device device) {
  Tensor t;
  count(shape);
  t.data_ = data;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.layout_ = t.shape_.size() == 4 ? layout : Layout::NCHW;
  t.device_ = device;
  return t;
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> s, size_t byte_offset,
                            std::vector<int64_t> shape, DType dtype, Layout layout) {
  Tensor t = view(static_cast<char*>(s->ptr) + byte_offset, std::move(shape), dtype, layout,
                  s->device);
  RN50_CHECK(byte_offset + t.nbytes() <= s->bytes || t.nbytes() == 0,
             "tensor {} does not fit its storage of {} bytes at offset {}", t.str(), s->bytes,
             byte_offset);
  t.storage_ = std::move(s);
  return t;
}

int64_t Tensor::dim(int i) const {
  int r = ndim();
  int j = i < 0 ? i + r : i;
  RN50_CHECK(j >= 0 && j < r, "dimension {} out of range for {}", i, str());
  return shape_[j];
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

int64_t Tensor::dim4(int i) const {
  RN50_CHECK(shape_.size() == 4, "expected a 4-D tensor, got {}", str());
  return shape_[i];
}

Tensor Tensor::reshape(std::vector<int64_t> shape, Layout layout) const {
  Tensor t = *this;
  RN50_CHECK(count(shape) == numel(), "cannot reshape {} to {} elements", str(), count(shape));
  t.shape_ = std::move(shape);
  t.layout_ = t.shape_.size() == 4 ? layout : Layout::NCHW;
  return t;
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  RN50_CHECK(ndim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0],
             "slice [{}, {}) out of range for {}", begin, end, str());
  Tensor t = *this;
  int64_t row = shape_[0] ? numel() / shape_[0] : 0;
  t.data_ = static_cast<char*>(data_) + begin * row * static_cast<int64_t>(dtype_size(dtype_));
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::clone() const {
  RN50_CHECK(is_cpu(), "clone() of a {} tensor: copy it to the host first", device_.str());
  Tensor t = empty(shape_, dtype_, layout_);
  std::memcpy(t.data_, data_, nbytes());
  return t;
}

Tensor Tensor::to_layout(Layout layout) const {
  if (ndim() != 4 || layout == layout_) return clone();
  RN50_CHECK(is_cpu(), "to_layout() of a {} tensor: copy it to the host first", device_.str());
  Tensor t = empty(shape_, dtype_, layout);
  size_t es = dtype_size(dtype_);
  const char* src = static_cast<const char*>(data_);
  char* dst = static_cast<char*>(t.data_);
  for (int64_t n = 0; n < shape_[0]; ++n)
    for (int64_t c = 0; c < shape_[1]; ++c)
      for (int64_t h = 0; h < shape_[2]; ++h)
        for (int64_t w = 0; w < shape_[3]; ++w)
          std::memcpy(dst + t.offset4(n, c, h, w) * es, src + offset4(n, c, h, w) * es, es);
  return t;
}

void Tensor::fill(double v) {
  RN50_CHECK(is_cpu(), "fill() of a {} tensor", device_.str());
  int64_t n = numel();
  switch (dtype_) {
    case DType::f32: std::fill_n(data_as<float>(), n, static_cast<float>(v)); break;
    case DType::f64: std::fill_n(data_as<double>(), n, v); break;
    case DType::i32: std::fill_n(data_as<int32_t>(), n, static_cast<int32_t>(v)); break;
    case DType::i64: std::fill_n(data_as<int64_t>(), n, static_cast<int64_t>(v)); break;
    case DType::u8: std::fill_n(data_as<uint8_t>(), n, static_cast<uint8_t>(v)); break;
    default: RN50_FAIL("fill() not supported for dtype {}", dtype_name(dtype_));
  }
}

std::string Tensor::str() const {
  std::string s = dtype_name(dtype_);
  s += "[";
  for (size_t i = 0; i < shape_.size(); ++i) s += (i ? "," : "") + std::to_string(shape_[i]);
  s += "]";
  if (shape_.size() == 4) s += std::string(" ") + layout_name(layout_);
  s += " " + device_.str();
  return s;
}

}  // namespace rn50
