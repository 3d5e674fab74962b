// The config a resumed run continues with: its own resolved config.toml, not
// whatever the TOML given on the command line says today.
//
// Resume must equal an uninterrupted run, so a run continues as it was
// configured. A key may change only through an explicit --set, only among the
// keys that cannot alter what the run learns (how long it runs, how often it
// evaluates and saves, threads), and every change is logged. A config file
// that differs from the run's is reported and not used.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "trainers/runtime/experiment.h"

namespace rlid::trainers {

// Keys an explicit --set may change when a run resumes.
const std::set<std::string>& ResumeChangeableKeys();

// Loads `run_dir`/config.toml with `sets` applied (ConfigError for a set of a
// key outside ResumeChangeableKeys, naming it); logs each change and each key
// where `given_config` (may be empty) differs from the run's own config.
std::unique_ptr<ExperimentConfig> LoadResumeConfig(const std::string& run_dir,
                                                   const std::string& given_config,
                                                   const std::vector<std::string>& sets);

}  // namespace rlid::trainers
