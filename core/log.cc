#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "core/error.h"

#ifndef RLID_VERSION
#define RLID_VERSION "dev"
#endif
#ifndef RLID_GIT_VERSION
#define RLID_GIT_VERSION "unknown"
#endif

namespace rlid {

void SetupLogging(std::string_view level) {
  auto lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off")
    throw ConfigError(fmt::format("unknown log level '{}'", level),
                      "use trace, debug, info, warn, error or off");
  static bool initialised = false;
  if (!initialised) {
    auto logger = spdlog::stderr_color_mt("rlid");
    spdlog::set_default_logger(logger);
    spdlog::set_pattern("[%H:%M:%S] [%^%l%$] %v");
    initialised = true;
  }
  spdlog::set_level(lvl);
}

std::string VersionString() { return std::string(RLID_VERSION) + " (git " RLID_GIT_VERSION ")"; }

}  // namespace rlid
