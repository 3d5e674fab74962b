// Logging setup (spdlog to stderr) and the build's version string. Library code
// logs through spdlog's default logger; the CLI sets the level from --log-level.
#pragma once

#include <spdlog/spdlog.h>

#include <string>
#include <string_view>

namespace rlid {

// level: trace|debug|info|warn|error|off. Unknown levels are a ConfigError.
void SetupLogging(std::string_view level = "info");
// "0.1.0 (git abc123)".
std::string VersionString();

}  // namespace rlid
