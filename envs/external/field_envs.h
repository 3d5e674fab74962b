// The field's benchmark environments (OpenSpiel, ...): Python packages from
// PyPI, each wrapped by an adapter in its own folder of envs/external/adapters/
// (adapter.py, which speaks the external-env protocol, and adapter.toml, its
// manifest: summary, pinned packages and the [env] keys it reads). Each
// folder is registered under its name, so `[env] name = "openspiel"` (or
// `--env openspiel`) starts it like a built-in env: its own [env] keys
// (game = "...") go to the adapter in hello, the keys of `external` (workers,
// timeout_s, afterstates, on_error) apply. Adding an adapter is adding a
// folder. The adapter runs with the project's Python: $RLID_ADAPTER_PYTHON,
// else the checkout's .venv/bin/python, else python3 on PATH; it checks its
// pinned package versions first and fails with the package and the fix. No
// LibTorch.
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

// An adapter folder as its manifest (adapter.toml) describes it.
struct FieldAdapter {
  std::string name;     // the env's registered name: the folder's
  std::string script;   // its adapter.py
  std::string summary;  // for `rlid env list`
  std::vector<std::string> packages;  // what it wraps, pinned: "open_spiel==2.0.2", ...
  std::vector<AdapterKey> keys;
  // One of these keys must be given (a config error naming them otherwise).
  std::vector<std::string> one_of_required = {};
  // Why the manifest could not be read (the env is then registered to report it).
  std::string error;
};

// Every adapter folder of AdapterDir(), by name.
const std::vector<FieldAdapter>& FieldAdapters();
// One manifest (exposed for tests); a problem goes to FieldAdapter::error.
FieldAdapter ReadAdapterManifest(const std::string& folder);

// The interpreter the adapters run with, and the folder they are in
// ($RLID_ADAPTERS_DIR, else the checkout's envs/external/adapters).
std::string AdapterPython();
std::string AdapterDir();

}  // namespace rlid::envs
