// rn50: the Winograd ops' per-chunk batched matmuls (winograd_products.h).
#include "backend/cpu/winograd_products.h"

#include <algorithm>
#include <unordered_map>

namespace rn50::onednn {

using dnnl::memory;
using tag = memory::format_tag;

ChunkProducts::ChunkProducts(const dnnl::engine& eng, const memory::desc& u, memory::data_type src,
                             int64_t chunk, int64_t last, int threads)
    : eng_(eng),
      positions_(u.dims()[0]),
      c_(u.dims()[1]),
      kt_(u.dims()[2]),
      chunk_(chunk),
      src_(src) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  size_t scratch = 0;
  for (int i = 0; i < (last == chunk ? 1 : 2); ++i) {
    const int64_t rows = i == 0 ? chunk : last;
    const memory::desc vd({positions_, rows, c_}, src, tag::abc),
        md({positions_, rows, kt_}, memory::data_type::f32, tag::abc);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(vd, u, md), attr, eng);
    mm_[i] = dnnl::matmul(pd);
    scratch_desc_[i] = pd.scratchpad_desc();
    scratch = std::max(scratch, pd.scratchpad_desc().get_size());
  }
  scratch_.assign(static_cast<size_t>(threads), aligned_vector<char>(scratch));
  for (int t = 0; t < threads; ++t) streams_.emplace_back(eng);
}

void ChunkProducts::run(int t, int64_t rows, void* v, const memory& u, float* m) {
  const auto ti = static_cast<size_t>(t);
  const int which = rows == chunk_ ? 0 : 1;
  const memory vm({{positions_, rows, c_}, src_, tag::abc}, eng_, v);
  const memory mm({{positions_, rows, kt_}, memory::data_type::f32, tag::abc}, eng_, m);
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, vm}, {DNNL_ARG_WEIGHTS, u}, {DNNL_ARG_DST, mm}};
  if (!scratch_[ti].empty())
    args[DNNL_ARG_SCRATCHPAD] = memory(scratch_desc_[which], eng_, scratch_[ti].data());
  mm_[which].execute(streams_[ti], args);
  streams_[ti].wait();
}

}  // namespace rn50::onednn
