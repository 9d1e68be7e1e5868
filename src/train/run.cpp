// rn50: the entry points of include/rn50/train.h — each builds a Session (train/session.h)
// and runs one driver; an error in a multi-process run stops every rank.
#include <iostream>

#include "core/environment.h"
#include "core/logger.h"
#include "rn50/parallel.h"
#include "config/config.h"
#include "train/session.h"
#include "train/validation.h"

namespace rn50 {

namespace {

/// Runs `driver` on a Session of `cfg`; on an error with several processes, stops every rank
/// (Communicator::abort) instead of leaving them in a collective.
template <class Driver>
auto with_session(const Config& cfg, const ProcessInfo& proc, Logger& log, Driver driver) {
  std::unique_ptr<Session> s;
  try {
    s = std::make_unique<Session>(cfg, proc, log);
    return driver(*s);
  } catch (const std::exception& e) {
    if (s && s->comm().world_size() > 1) s->comm().abort(e.what());
    throw;
  }
}

/// `cfg` for this process: the launcher's world size, validated.
Config resolved(Config cfg, const ProcessInfo& proc) {
  cfg.world_size = proc.world_size;
  validate(cfg);
  return cfg;
}

}  // namespace

int run_train(const Config& config) {
  try {
    const ProcessInfo proc = ProcessInfo::from_environment();
    const Config cfg = resolved(config, proc);
    Logger log = Logger::for_rank(proc.rank, proc.world_size, cfg.log_all_ranks);
    with_session(cfg, proc, log, [&](Session& s) {
      if (cfg.run_scope == RunScope::eval_only)
        cfg.benchmark ? run_eval_benchmark(s) : run_eval_only(s);
      else if (cfg.benchmark)
        run_train_benchmark(s);
      else
        run_training(s);
    });
    return 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "error: " << error_text(e) << "\n";
    // An error before the Session existed (e.g. in its constructor, after the communicator was
    // made) has no Communicator::abort above: stop the other ranks here, or this one would
    // wait for them in MPI_Finalize while they wait for it in a collective.
    abort_job_if_distributed(1);
  }
  return 1;
}

int run_eval(Config cfg) {
  cfg.run_scope = RunScope::eval_only;
  return run_train(cfg);
}

TrainBenchmarkResult benchmark_train(Config config, bool verbose) {
  config.benchmark = true;
  const ProcessInfo proc = ProcessInfo::from_environment();
  const Config cfg = resolved(config, proc);
  Logger log(verbose && proc.rank == 0);
  reset_peak_rss();
  TrainBenchmarkResult r =
      with_session(cfg, proc, log, [](Session& s) { return run_train_benchmark(s); });
  r.peak_host_rss_bytes = peak_rss_bytes();
  return r;
}

}  // namespace rn50
