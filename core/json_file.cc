#include "core/json_file.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/file_io.h"

namespace rlid {

nlohmann::json ReadJsonFile(const std::filesystem::path& path, std::string_view what, BadJson bad) {
  const std::string text = ReadRegularFile(path.string(), kMaxJsonFileBytes, what);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    std::string message = fmt::format("'{}' is not valid JSON: {}", path.string(), e.what());
    if (bad == BadJson::kConfigError) throw ConfigError(std::move(message));
    throw IoError(std::move(message));
  }
}

}  // namespace rlid
