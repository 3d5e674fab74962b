// _rlid.Env: one env and the state of its current episode. make(name,
// params) -> reset(seed) -> menu() / compile(text) / step(item or text),
// mirroring what `rlid env show` and `rlid env play` do. Calls that touch the
// episode release the GIL (an external env's step waits on its process) and
// take the object's own lock: one Env may be shared by threads, its calls run
// one at a time.
#include <fmt/format.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "envs/api/env.h"
#include "python/src/bindings.h"

namespace py = pybind11;

namespace rlid::python {
namespace {

using envs::CompileResult;
using envs::Menu;
using envs::MenuItem;
using envs::StepOutcome;

// What step() returns: the outcome of the decision and where it led.
struct Transition {
  std::string observation;
  double reward = 0;
  bool terminal = false, success = false, truncated = false;
  int item = -1;        // menu index of the action taken
  std::string command;  // its canonical command
};

class PyEnv {
  template <class F>
  std::invoke_result_t<F> Locked(F f) const {
    std::lock_guard lock(mu_);
    return f();
  }

 public:
  PyEnv(const std::string& name, const std::vector<std::string>& params, uint64_t seed)
      : env_(envs::MakeEnv(name, params)) {
    Reset(seed);
  }

  py::dict Info() const {
    const envs::EnvInfo i = env_->Info();
    py::dict d;
    d["name"] = i.name;
    d["summary"] = i.summary;
    d["step_limit"] = i.step_limit;
    d["deterministic"] = i.deterministic;
    d["concurrency"] = i.concurrency;
    d["metadata"] = i.metadata;
    return d;
  }
  std::string Instructions() const { return env_->Instructions(); }

  void Reset(uint64_t seed) {
    std::lock_guard lock(mu_);
    seed_ = seed;
    state_ = env_->NewState(seed);
    menu_.reset();
  }

  uint64_t seed() const {
    return Locked([&] { return seed_; });
  }
  std::string Observation() const {
    return Locked([&] { return state_->Observation(); });
  }
  bool Terminal() const {
    return Locked([&] { return state_->IsTerminal(); });
  }
  int Steps() const {
    return Locked([&] { return state_->StepCount(); });
  }
  uint64_t Hash() const {
    return Locked([&] { return state_->Hash(); });
  }

  // The items of the current state's menu (none when terminal).
  std::vector<MenuItem> MenuItems() {
    std::lock_guard lock(mu_);
    return CurrentMenu().items;
  }

  CompileResult Compile(const std::string& text) {
    std::lock_guard lock(mu_);
    RequireLive("compile");
    CompileResult r = CurrentMenu().Compile(text);
    if (r.valid()) return r;
    if (const auto* own = dynamic_cast<const envs::TextCompiler*>(state_.get())) {
      CompileResult o = own->CompileText(text);
      if (o.valid()) return o;
    }
    return r;
  }

  Transition StepItem(int item) {
    std::lock_guard lock(mu_);
    RequireLive("step");
    const Menu& menu = CurrentMenu();
    if (item < 0 || item >= static_cast<int>(menu.size()))
      throw ConfigError(fmt::format("menu item {} does not exist: this menu has {} items (0..{})",
                                    item, menu.size(), menu.size() - 1),
                        "pass a menu index, a label such as \"A\", or a command");
    const MenuItem chosen = menu.items[static_cast<size_t>(item)];
    const StepOutcome o = state_->Apply(chosen.action);
    menu_.reset();
    return Transition{state_->Observation(), o.reward, o.terminal,    o.success,
                      o.truncated,           item,     chosen.command};
  }

  // Menu indices of the optimal actions, or None for an env without an oracle.
  std::optional<std::vector<int>> Oracle() {
    std::lock_guard lock(mu_);
    const auto* oracle = dynamic_cast<const envs::OracleState*>(state_.get());
    if (!oracle || state_->IsTerminal()) return std::nullopt;
    std::vector<int> out;
    const Menu& menu = CurrentMenu();
    for (envs::ActionId a : oracle->OptimalActions()) out.push_back(menu.IndexOfAction(a));
    return out;
  }

 private:
  void RequireLive(const char* what) const {
    if (state_->IsTerminal())
      throw ConfigError(fmt::format("cannot {}: the episode is over", what),
                        "call reset() to start the next one");
  }

  // The menu of the current state (empty when terminal), compiled once per
  // state; the caller holds mu_.
  const Menu& CurrentMenu() {
    if (!menu_) menu_ = state_->IsTerminal() ? Menu{} : state_->CompileMenu();
    return *menu_;
  }

  mutable std::mutex mu_;  // guards state_, menu_ and seed_
  std::unique_ptr<envs::Env> env_;
  std::unique_ptr<envs::State> state_;
  std::optional<Menu> menu_;
  uint64_t seed_ = 0;
};

}  // namespace

void BindEnvs(py::module_& m) {
  m.def("env_names", [] {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [name, e] : envs::EnvRegistry::Global().entries())
      out.emplace_back(name, e.summary);
    return out;
  });

  py::class_<MenuItem>(m, "MenuItem", "one executable action of a menu")
      .def_readonly("label", &MenuItem::label)
      .def_readonly("command", &MenuItem::command)
      .def_readonly("realisations", &MenuItem::realisations,
                    "every realisation but the label, command first")
      .def_property_readonly(
          "wordings",
          [](const MenuItem& i) {
            if (PyErr_WarnEx(PyExc_DeprecationWarning,
                             "MenuItem.wordings is deprecated: use MenuItem.realisations", 1) < 0)
              throw py::error_already_set();
            return i.realisations;
          },
          "deprecated name of realisations")
      .def_readonly("afterstate", &MenuItem::afterstate, "text of the state it leads to")
      .def_readonly("afterstate_hash", &MenuItem::afterstate_hash)
      .def_readonly("action", &MenuItem::action, "the env's action id")
      .def_readonly("same_afterstate_as", &MenuItem::same_afterstate_as)
      .def("__repr__", [](const MenuItem& i) {
        return fmt::format("MenuItem(label={:?}, command={:?})", i.label, i.command);
      });

  py::class_<CompileResult>(m, "Compiled", "free text compiled against the current menu")
      .def_property_readonly("valid", &CompileResult::valid)
      .def_readonly("item", &CompileResult::item, "menu index (-1 when invalid)")
      .def_readonly("action", &CompileResult::action)
      .def_readonly("matched", &CompileResult::matched, "the realisation that matched")
      .def_readonly("realisation", &CompileResult::realisation,
                    "0 = the label, k >= 1 = realisations[k - 1], -1 = invalid or env-compiled")
      .def_readonly("reason", &CompileResult::reason, "why the text is invalid")
      .def("__bool__", &CompileResult::valid)
      .def("__repr__", [](const CompileResult& r) {
        return r.valid() ? fmt::format("Compiled(item={}, matched={:?})", r.item, r.matched)
                         : fmt::format("Compiled(invalid, reason={:?})", r.reason);
      });

  py::class_<Transition>(m, "Transition", "what step() returns")
      .def_readonly("observation", &Transition::observation)
      .def_readonly("reward", &Transition::reward)
      .def_readonly("terminal", &Transition::terminal)
      .def_readonly("success", &Transition::success)
      .def_readonly("truncated", &Transition::truncated)
      .def_readonly("item", &Transition::item)
      .def_readonly("command", &Transition::command)
      .def("__repr__", [](const Transition& t) {
        return fmt::format("Transition(command={:?}, reward={}, terminal={}, success={})",
                           t.command, t.reward, t.terminal ? "True" : "False",
                           t.success ? "True" : "False");
      });

  using Release = py::call_guard<py::gil_scoped_release>;
  py::class_<PyEnv>(m, "Env")
      .def(py::init<const std::string&, const std::vector<std::string>&, uint64_t>(),
           py::arg("name"), py::arg("params"), py::arg("seed"), Release())
      .def("info", &PyEnv::Info)
      .def("instructions", &PyEnv::Instructions)
      .def("reset", &PyEnv::Reset, py::arg("seed"), Release())
      .def_property_readonly("seed", py::cpp_function(&PyEnv::seed, Release()))
      .def_property_readonly("observation", py::cpp_function(&PyEnv::Observation, Release()))
      .def_property_readonly("terminal", py::cpp_function(&PyEnv::Terminal, Release()))
      .def_property_readonly("steps", py::cpp_function(&PyEnv::Steps, Release()))
      .def_property_readonly("state_hash", py::cpp_function(&PyEnv::Hash, Release()))
      .def("menu", &PyEnv::MenuItems, Release())
      .def("compile", &PyEnv::Compile, py::arg("text"), Release())
      .def("step_item", &PyEnv::StepItem, py::arg("item"), Release())
      .def("oracle", &PyEnv::Oracle, Release());
}

}  // namespace rlid::python
