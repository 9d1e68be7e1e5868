// rn50: CPU affinity of the ranks of a node: each local rank gets an equal share of whole
// physical cores (sysfs topology), on GPU nodes within its GPU's NUMA node (sysfs local_cpulist
// of the GPU's PCI device), unless the launcher already bound the process.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "core/check.h"
#include "parallel/affinity.h"
#include "rn50/parallel.h"

#ifdef RN50_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace rn50 {
namespace parallel {

std::vector<int> parse_cpulist(const std::string& text) {
  std::vector<int> cpus;
  std::string s;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t dash = item.find('-');
    auto number = [&](const std::string& v) {
      RN50_CHECK(!v.empty() && v.size() <= 7 &&
                     std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }),
                 "malformed cpu list '{}' (item '{}')", text, item);
      return std::stoi(v);
    };
    int lo = number(item.substr(0, dash));
    int hi = dash == std::string::npos ? lo : number(item.substr(dash + 1));
    RN50_CHECK(lo <= hi, "malformed cpu list '{}' (range '{}' is reversed)", text, item);
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string format_cpulist(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<int> share_of_cores(const std::vector<int>& allowed, int local_rank, int local_size,
                                const std::vector<std::vector<int>>& gpu_node_cpus,
                                const std::function<CpuPlace(int)>& place) {
  RN50_CHECK(local_size >= 1 && local_rank >= 0 && local_rank < local_size,
             "cores_for_local_rank: local rank {} is not in [0, {})", local_rank, local_size);
  std::vector<int> pool = allowed;
  int index = local_rank, sharers = local_size;
  if (static_cast<int>(gpu_node_cpus.size()) >= local_size && !gpu_node_cpus[local_rank].empty()) {
    const std::vector<int>& node = gpu_node_cpus[local_rank];
    std::vector<int> inter;
    for (int c : allowed)
      if (std::find(node.begin(), node.end(), c) != node.end()) inter.push_back(c);
    if (!inter.empty()) {
      pool = inter;
      index = sharers = 0;
      for (int r = 0; r < local_size; ++r) {
        if (gpu_node_cpus[r] != node) continue;
        if (r == local_rank) index = sharers;
        ++sharers;
      }
    }
  }
  // Physical cores of the pool, ordered by (package, core), each with its CPUs.
  std::map<std::pair<int, int>, std::vector<int>> cores;
  for (int c : pool) {
    CpuPlace p = place(c);
    cores[{p.package, p.core}].push_back(c);
  }
  if (static_cast<int>(cores.size()) < sharers) return pool;
  const size_t n = cores.size();
  const size_t begin = n * index / sharers, end = n * (index + 1) / sharers;
  std::vector<int> share;
  size_t i = 0;
  for (auto& [key, cpus] : cores) {
    if (i >= begin && i < end) share.insert(share.end(), cpus.begin(), cpus.end());
    ++i;
  }
  std::sort(share.begin(), share.end());
  return share;
}

namespace {

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  if (f) std::getline(f, line);
  return line;
}

/// Package and physical core of a CPU from sysfs; a CPU of its own when unreadable.
CpuPlace sysfs_place(int cpu) {
  const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
  CpuPlace p{0, cpu};
  std::string pkg = read_line(dir + "physical_package_id");
  if (!pkg.empty()) p.package = std::atoi(pkg.c_str());
  std::string siblings = read_line(dir + "thread_siblings_list");
  try {
    std::vector<int> s = parse_cpulist(siblings);
    if (!s.empty()) p.core = s.front();
  } catch (const Error&) {
  }
  return p;
}

constexpr int kMaxCpus = 8192;

std::vector<int> process_cpus() {
  cpu_set_t* set = CPU_ALLOC(kMaxCpus);
  const size_t size = CPU_ALLOC_SIZE(kMaxCpus);
  CPU_ZERO_S(size, set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, size, set) == 0) {
    for (int c = 0; c < kMaxCpus; ++c)
      if (CPU_ISSET_S(c, size, set)) cpus.push_back(c);
  }
  CPU_FREE(set);
  return cpus;
}

/// Per local rank r, the CPUs of the NUMA node of GPU r % device_count (sysfs local_cpulist of
/// its PCI device); empty when there is no GPU or the topology cannot be read.
std::vector<std::vector<int>> gpu_node_cpus(int local_size) {
  std::vector<std::vector<int>> out;
#ifdef RN50_HAVE_CUDA
  const int n = cuda_device_count();
  if (n <= 0) return out;
  for (int r = 0; r < local_size; ++r) {
    char bus[64] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), r % n) != cudaSuccess) return {};
    std::string id(bus);
    for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    // CUDA may print an 8-digit PCI domain ("00000000:3b:00.0"); sysfs uses 4 ("0000:3b:00.0").
    size_t colon = id.find(':');
    if (colon != std::string::npos && colon > 4) id = id.substr(colon - 4);
    try {
      out.push_back(parse_cpulist(read_line("/sys/bus/pci/devices/" + id + "/local_cpulist")));
    } catch (const Error&) {
      out.push_back({});
    }
  }
#endif
  return out;
}

}  // namespace
}  // namespace parallel

bool cores_bound_by_launcher() {
  const char* ompi = std::getenv("OMPI_MCA_orte_bound_at_launch");
  if (ompi != nullptr && std::string(ompi) == "1") return true;
  const char* slurm = std::getenv("SLURM_CPU_BIND_TYPE");
  return slurm != nullptr && *slurm != '\0' && std::strncmp(slurm, "none", 4) != 0;
}

std::vector<int> cores_for_local_rank(int local_rank, int local_size) {
  RN50_CHECK(local_size >= 1 && local_rank >= 0 && local_rank < local_size,
             "cores_for_local_rank: local rank {} is not in [0, {})", local_rank, local_size);
  std::vector<int> allowed = parallel::process_cpus();
  if (cores_bound_by_launcher() || allowed.empty()) return allowed;
  return parallel::share_of_cores(allowed, local_rank, local_size,
                                  parallel::gpu_node_cpus(local_size), parallel::sysfs_place);
}

std::string bind_to_cores(const std::vector<int>& cores) {
  if (cores.empty()) return "";
  int max_cpu = *std::max_element(cores.begin(), cores.end());
  RN50_CHECK(*std::min_element(cores.begin(), cores.end()) >= 0 && max_cpu < parallel::kMaxCpus,
             "bind_to_cores: cpu ids must be in [0, {}) (got {})", parallel::kMaxCpus,
             parallel::format_cpulist(cores));
  cpu_set_t* set = CPU_ALLOC(max_cpu + 1);
  const size_t size = CPU_ALLOC_SIZE(max_cpu + 1);
  CPU_ZERO_S(size, set);
  for (int c : cores) CPU_SET_S(c, size, set);
  int rc = sched_setaffinity(0, size, set);
  int err = errno;
  CPU_FREE(set);
  RN50_CHECK(rc == 0, "bind_to_cores: sched_setaffinity to cores {} failed: {}",
             parallel::format_cpulist(cores), std::strerror(err));
  return "cores " + parallel::format_cpulist(cores);
}

}  // namespace rn50
