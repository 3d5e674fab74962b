// The field's benchmark environments (OpenSpiel, ...): Python packages from
// PyPI, each wrapped by an adapter program in envs/external/python/adapters/
// that speaks the external-env protocol. Each is registered under its own name,
// so `[env] name = "openspiel"` (or `--env openspiel`) starts it like a
// built-in env: its own [env] keys (game = "...") go to the adapter in hello,
// the keys of `external` (workers, timeout_s, afterstates, on_error) apply.
// The adapter runs with the project's Python: $RLID_ADAPTER_PYTHON, else the
// checkout's .venv/bin/python, else python3 on PATH; it checks its pinned
// package versions first and fails with the package and the fix. They are
// not in BuiltInEnvNames() (they need Python and their package). No LibTorch.
#pragma once

#include <string>
#include <vector>

namespace rlid::envs {

// One [env] key an adapter reads (sent in hello params under the same name).
struct AdapterKey {
  std::string name;
  enum class Kind { kString, kInt, kDouble, kTable } kind = Kind::kString;
  std::string doc;  // names the adapter's default (a key left out keeps it)
};

struct FieldAdapter {
  std::string name;     // the env's registered name
  std::string script;   // in the adapters folder
  std::string summary;  // for `rlid env list`
  std::string packages;  // what it wraps, as pinned ("open_spiel 2.0.2")
  std::vector<AdapterKey> keys;
  // One of these keys must be given (a config error naming them otherwise).
  std::vector<std::string> one_of_required = {};
};

// Every adapter rlid ships, by name.
const std::vector<FieldAdapter>& FieldAdapters();
bool IsFieldAdapter(const std::string& name);

// The interpreter the adapters run with, and the folder they are in
// ($RLID_ADAPTERS_DIR, else the checkout's envs/external/python/adapters).
std::string AdapterPython();
std::string AdapterDir();

}  // namespace rlid::envs
