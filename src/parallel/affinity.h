// rn50: the pure parts of CPU affinity (cpu lists, the per-rank share of cores), separated from
// the system calls in affinity.cpp so that tests can feed them made-up machines.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace rn50::parallel {

/// Parses a Linux cpu list as in sysfs (".../local_cpulist") and /proc/self/status
/// ("0-3,8,10-11"; blanks and a trailing newline allowed) into sorted unique CPU ids.
/// Throws rn50::Error quoting the text when it is malformed.
std::vector<int> parse_cpulist(const std::string& text);
/// The compact form of a set of CPU ids: "0-3,8,10-11" (sorted, duplicates dropped).
std::string format_cpulist(std::vector<int> cpus);

/// Where a CPU sits: its package (socket) and its physical core (any id shared by exactly its
/// SMT siblings, e.g. the first CPU of sysfs' thread_siblings_list).
struct CpuPlace {
  int package = 0;
  int core = 0;
};

/// The CPUs local rank `local_rank` of `local_size` should use, from the CPUs `allowed` to the
/// process. Whole physical cores (all their SMT siblings together), ordered by package then
/// core, are split into `local_size` contiguous, equal (+-1) shares, so ranks never share a
/// physical core and each stays within as few packages as possible.
/// gpu_node_cpus: when not empty, entry r lists the CPUs of the NUMA node of local rank r's GPU
/// (empty entry: unknown); the ranks whose GPUs share a node then split that node's allowed
/// CPUs among themselves instead. When there are fewer physical cores than ranks to share them,
/// the whole pool is returned (no useful binding). `place` gives each CPU's package and core.
/// Throws rn50::Error when local_rank is not in [0, local_size).
std::vector<int> share_of_cores(const std::vector<int>& allowed, int local_rank, int local_size,
                                const std::vector<std::vector<int>>& gpu_node_cpus,
                                const std::function<CpuPlace(int)>& place);

}  // namespace rn50::parallel
