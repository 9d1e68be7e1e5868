// rn50: the commands of the CLI, each run from its resolved Config (tools/commands.cpp).
#pragma once

#include "config/flags.h"
#include "rn50/config.h"

namespace rn50::cli {

/// Runs `command` with `cfg` (its flags set from the flag table, config/flags.h): the flags
/// the command takes are value-checked, the Config becomes the library call's options, and the
/// command runs. Returns the process exit code (0 ok; 1 a run failed, its message printed);
/// throws rn50::Error on a bad flag combination (the CLI prints it and exits with 2).
int run(Command command, const Config& cfg);

}  // namespace rn50::cli
