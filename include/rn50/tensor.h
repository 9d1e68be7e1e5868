// rn50: Tensor — a typed, shaped view of memory on a device.
//
// Conventions (used by every op and backend):
//  * 4-D tensors always have the LOGICAL shape (N, C, H, W), whatever their memory layout.
//    Layout::NCHW stores them as N,C,H,W (row-major); Layout::NHWC as N,H,W,C ("channels last").
//    Convolution weights are 4-D (K, C, R, S) in Layout::NCHW, i.e. torchvision's OIHW.
//  * Tensors of any other rank are dense row-major; their layout field is NCHW and ignored.
//  * A Tensor either owns its storage (Tensor::empty, 64-byte aligned host memory, or memory a
//    Backend allocated) or views memory owned elsewhere (Tensor::view, slices of a slab).
//    Copying a Tensor copies the handle, never the data (shared ownership).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rn50/error.h"

namespace rn50 {

/// Element types. f32 is the master type; f16/bf16 are AMP compute types; u8 holds decoded
/// images; i32 labels; i64 torchvision's num_batches_tracked; f64 is used by tests only.
enum class DType : uint8_t { f32, f16, bf16, f64, u8, i32, i64 };

/// Bytes per element of `t`.
size_t dtype_size(DType t);
/// Lower-case name as in safetensors/torch ("F32", "F16", "BF16", "F64", "U8", "I32", "I64").
const char* dtype_name(DType t);

/// Memory order of a 4-D tensor with logical shape (N, C, H, W).
enum class Layout : uint8_t { NCHW, NHWC };
const char* layout_name(Layout l);
/// Parses "NCHW"/"NHWC" (case-insensitive). Throws rn50::Error naming the value otherwise.
Layout parse_layout(const std::string& s);

enum class DeviceType : uint8_t { CPU, CUDA };
/// A device: CPU, or CUDA with an ordinal.
struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  bool operator==(const Device&) const = default;
  std::string str() const;  ///< "cpu" or "cuda:N"
};

/// Byte storage shared by tensors. `deleter` frees `ptr`; a null deleter means "not owned".
struct Storage {
  void* ptr = nullptr;
  size_t bytes = 0;
  Device device;
  void (*deleter)(void*) = nullptr;
  ~Storage();
};

class Tensor {
 public:
  Tensor() = default;

  /// Owning, uninitialised, 64-byte-aligned host tensor. Throws rn50::Error on a negative dim.
  static Tensor empty(std::vector<int64_t> shape, DType dtype, Layout layout = Layout::NCHW);
  /// Owning host tensor filled with zeros.
  static Tensor zeros(std::vector<int64_t> shape, DType dtype, Layout layout = Layout::NCHW);
  /// Non-owning view of `data` (which must outlive every use of the view).
  static Tensor view(void* data, std::vector<int64_t> shape, DType dtype,
                     Layout layout = Layout::NCHW, Device device = {});
  /// Tensor over storage that a backend allocated (takes shared ownership).
  static Tensor from_storage(std::shared_ptr<Storage> s, size_t byte_offset,
                             std::vector<int64_t> shape, DType dtype, Layout layout);

  bool defined() const { return data_ != nullptr; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  /// Size of dimension i; negative i counts from the end. Throws on out-of-range.
  int64_t dim(int i) const;
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Layout layout() const { return layout_; }
  Device device() const { return device_; }
  bool is_cpu() const { return device_.type == DeviceType::CPU; }

  void* data() const { return data_; }
  template <class T>
  T* data_as() const { return static_cast<T*>(data_); }

  /// Logical (N,C,H,W) sizes of a 4-D tensor (throw if ndim != 4).
  int64_t n() const { return dim4(0); }
  int64_t c() const { return dim4(1); }
  int64_t h() const { return dim4(2); }
  int64_t w() const { return dim4(3); }
  /// Element offset of logical index (n,c,h,w) in a 4-D tensor, honouring the layout.
  int64_t offset4(int64_t n, int64_t c, int64_t h, int64_t w) const {
    return layout_ == Layout::NCHW ? ((n * shape_[1] + c) * shape_[2] + h) * shape_[3] + w
                                   : ((n * shape_[2] + h) * shape_[3] + w) * shape_[1] + c;
  }

  /// Same memory, new shape (numel must match; layout reset to `layout`). Throws otherwise.
  Tensor reshape(std::vector<int64_t> shape, Layout layout = Layout::NCHW) const;
  /// Rows [begin, end) of the first dimension (a view).
  Tensor slice0(int64_t begin, int64_t end) const;
  /// Host-only: a deep copy in the same layout.
  Tensor clone() const;
  /// Host-only: a deep copy converted to `layout` (4-D) .
  Tensor to_layout(Layout layout) const;
  /// Host-only: fill with a value (f32/f64/i32/i64/u8).
  void fill(double v);
  /// "F32[2,3,4,4] NHWC cpu" for messages.
  std::string str() const;
  bool same_shape(const Tensor& o) const { return shape_ == o.shape_; }

 private:
  int64_t dim4(int i) const;
  std::shared_ptr<Storage> storage_;
  void* data_ = nullptr;
  std::vector<int64_t> shape_;
  DType dtype_ = DType::f32;
  Layout layout_ = Layout::NCHW;
  Device device_;
};

}  // namespace rn50
