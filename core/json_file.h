// Reading a JSON file whole (the JSON files of model, tokenizer and checkpoint
// directories), with core/file_io.h's checks: only a regular file, at most
// kMaxJsonFileBytes.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

namespace rlid {

// What a file that is not valid JSON is: a damaged file rlid wrote or reads
// as data (IoError, exit code 3), or a mistake in a file users edit
// (ConfigError, exit code 2).
enum class BadJson { kIoError, kConfigError };

// The JSON document in the file at `path`. IoError naming `what` when it is
// missing, unreadable, not a regular file or too large (ReadRegularFile);
// `bad` ("'PATH' is not valid JSON: ...") when it does not parse.
nlohmann::json ReadJsonFile(const std::filesystem::path& path, std::string_view what = "JSON file",
                            BadJson bad = BadJson::kIoError);

}  // namespace rlid
