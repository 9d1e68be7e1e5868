// rn50: where this process sits in a data-parallel job, read from the launcher's environment.
//  * OpenMPI's mpirun (also OpenMPI's srun integration): OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,
//    LOCAL_SIZE} (https://docs.open-mpi.org/en/v5.0.x/tuning-apps/environment-var.html).
//  * Slurm's srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the tasks on this node from
//    SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE (compressed lists such as "2(x3),1",
//    indexed by SLURM_STEP_NODEID / SLURM_NODEID), else SLURM_NTASKS_PER_NODE (sbatch/srun man
//    pages, "OUTPUT ENVIRONMENT VARIABLES").
// OpenMPI's variables win when both are present (mpirun inside a Slurm allocation).
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "rn50/parallel.h"

namespace rn50 {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

/// A non-negative decimal integer (surrounding blanks allowed); throws naming the variable.
int parse_count(const char* name, const std::string& value) {
  size_t b = value.find_first_not_of(" \t"), e = value.find_last_not_of(" \t");
  std::string v = b == std::string::npos ? "" : value.substr(b, e - b + 1);
  bool ok = !v.empty() && v.size() <= 9;
  for (char c : v) ok = ok && c >= '0' && c <= '9';
  RN50_CHECK(ok, "environment variable {}='{}' is not a non-negative integer", name, value);
  return std::stoi(v);
}

int required(const char* name, const char* launcher, const char* set_by) {
  std::optional<std::string> v = env(name);
  RN50_CHECK(v.has_value(), "{} launch ({} is set) but {} is missing from the environment",
             launcher, set_by, name);
  return parse_count(name, *v);
}

/// Entry `node` of a Slurm tasks-per-node list, e.g. "2(x3),1" = {2, 2, 2, 1}.
int tasks_on_node(const char* name, const std::string& list, int node) {
  int index = 0;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos
                                                                    : comma - pos);
    int repeat = 1;
    size_t paren = item.find('(');
    std::string count = item;
    if (paren != std::string::npos) {
      RN50_CHECK(item.size() > paren + 3 && item.compare(paren, 2, "(x") == 0 &&
                     item.back() == ')',
                 "environment variable {}='{}': malformed item '{}' (expected N or N(xM))", name,
                 list, item);
      count = item.substr(0, paren);
      repeat = parse_count(name, item.substr(paren + 2, item.size() - paren - 3));
    }
    int tasks = parse_count(name, count);
    if (node < index + repeat) return tasks;
    index += repeat;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  RN50_FAIL("environment variable {}='{}' lists {} nodes but this is node {}", name, list, index,
            node);
}

void validate(const ProcessInfo& p, const std::string& vars) {
  RN50_CHECK(p.world_size >= 1, "{}: world size {} must be at least 1", vars, p.world_size);
  RN50_CHECK(p.rank < p.world_size, "{}: rank {} is not below the world size {}", vars, p.rank,
             p.world_size);
  RN50_CHECK(p.local_size >= 1 && p.local_size <= p.world_size,
             "{}: local size {} must be between 1 and the world size {}", vars, p.local_size,
             p.world_size);
  RN50_CHECK(p.local_rank < p.local_size, "{}: local rank {} is not below the local size {}",
             vars, p.local_rank, p.local_size);
}

}  // namespace

ProcessInfo ProcessInfo::from_environment() {
  ProcessInfo p;
  if (env("OMPI_COMM_WORLD_RANK") || env("OMPI_COMM_WORLD_SIZE")) {
    const char* set = env("OMPI_COMM_WORLD_RANK") ? "OMPI_COMM_WORLD_RANK" : "OMPI_COMM_WORLD_SIZE";
    p.launcher = "openmpi";
    p.rank = required("OMPI_COMM_WORLD_RANK", "OpenMPI", set);
    p.world_size = required("OMPI_COMM_WORLD_SIZE", "OpenMPI", set);
    p.local_rank = required("OMPI_COMM_WORLD_LOCAL_RANK", "OpenMPI", set);
    p.local_size = required("OMPI_COMM_WORLD_LOCAL_SIZE", "OpenMPI", set);
    validate(p, "OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}");
    return p;
  }
  if (env("SLURM_PROCID")) {
    p.launcher = "slurm";
    p.rank = required("SLURM_PROCID", "Slurm", "SLURM_PROCID");
    p.world_size = required("SLURM_NTASKS", "Slurm", "SLURM_PROCID");
    p.local_rank = required("SLURM_LOCALID", "Slurm", "SLURM_PROCID");
    const char* list_name = env("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE"
                                                             : "SLURM_TASKS_PER_NODE";
    const char* node_name = env("SLURM_STEP_NODEID") ? "SLURM_STEP_NODEID" : "SLURM_NODEID";
    std::optional<std::string> list = env(list_name), node = env(node_name);
    if (list && (node || list->find_first_of(",(") == std::string::npos)) {
      p.local_size = tasks_on_node(list_name, *list, node ? parse_count(node_name, *node) : 0);
    } else if (std::optional<std::string> per = env("SLURM_NTASKS_PER_NODE")) {
      p.local_size = parse_count("SLURM_NTASKS_PER_NODE", *per);
    } else {
      RN50_FAIL("Slurm launch (SLURM_PROCID is set) but the tasks per node are unknown: set "
                "SLURM_NTASKS_PER_NODE, or SLURM_TASKS_PER_NODE with SLURM_NODEID");
    }
    validate(p, "SLURM_{PROCID,NTASKS,LOCALID,TASKS_PER_NODE}");
    return p;
  }
  return p;
}

}  // namespace rn50
