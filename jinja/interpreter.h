// The tree-walking interpreter behind Template::Render, a port of @huggingface/jinja's
// runtime.ts: it evaluates the syntax tree against the context's values and enforces the
// RenderOptions bounds. One class, its members defined across the files named below.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jinja/ast.h"
#include "jinja/jinja.h"
#include "jinja/program.h"
#include "jinja/value.h"

namespace rlid::jinja::internal {

// Control flow of {% break %} / {% continue %}: thrown like the reference does, so a break
// inside a macro called from a loop ends that loop.
struct BreakSignal {
  size_t pos;
};
struct ContinueSignal {
  size_t pos;
};

// The globals the reference declares before the context: namespace(), range(),
// raise_exception(), strftime_now() and true/false/none in both spellings (globals.cc).
EnvPtr Globals();

class Interpreter {
 public:
  Interpreter(const Program& program, const RenderOptions& options)
      : program_(program), options_(options) {}

  // Namespaces are the only mutable values, so every reference cycle runs through one;
  // emptying them after the render frees everything the render built.
  ~Interpreter() {
    for (const auto& ns : namespaces_) ns->entries.clear();
  }

  std::string Run(const EnvPtr& global);

  // Converts a JSON context value (nlohmann::json or ordered_json); defined in jinja.cc, the
  // one place that renders.
  template <typename Json>
  Value FromJson(const Json& j, int depth = 0);

 private:
  // ---- bounds (interpreter.cc) ----
  struct DepthGuard {
    DepthGuard(Interpreter& in, size_t pos);
    ~DepthGuard() { --in.depth_; }
    Interpreter& in;
  };

  [[noreturn]] void Fail(const Node& n, const std::string& message) const;
  [[noreturn]] void Fail(size_t pos, const std::string& message) const;
  void CheckSize(size_t size, size_t pos) const;
  void Append(std::string& out, std::string_view add, size_t pos);
  void Charge(size_t n, size_t pos);
  static size_t Weight(const Value& v);
  void Spend(size_t n, size_t pos);
  Value NewArray(Array items, size_t pos, Type type = Type::kArray);
  Value Charged(Value v, size_t pos);

  // ---- statements and expressions (interpreter.cc) ----
  std::string Block(const std::vector<NodePtr>& body, const EnvPtr& env);
  Value Eval(const Node& n, const EnvPtr& env);
  Value EvalObject(const Node& n, const EnvPtr& env);
  Value EvalIf(const Node& n, const EnvPtr& env);
  void EvalSet(const Node& n, const EnvPtr& env);
  Value EvalFor(const Node& n, const EnvPtr& env);

  // ---- string forms (printing.cc) ----
  struct JsonStyle {
    int indent = 0;
    bool ensure_ascii = false;
    bool sort_keys = false;
    bool custom_separators = false;
    std::string item_separator, key_separator;
  };
  static std::string IntegerString(const Value& v);
  // A bool, number or string as ToString and RawString both write it; nullopt otherwise.
  static std::optional<std::string> ScalarText(const Value& v);
  std::string ToString(const Value& v, size_t pos, int depth = 0);
  std::string RawString(const Value& v, size_t pos, int depth = 0);
  void ToJson(const Value& v, const JsonStyle& style, int depth, bool undefined_to_null, size_t pos,
              std::string& out);
  static bool LocaleLess(const std::string& a, const std::string& b);

  // ---- equality, ordering and operators (operators.cc) ----
  static double RawNumber(const Value& v);
  bool LooseEquals(const Value& a, const Value& b, size_t pos);
  static bool SameReference(const Value& a, const Value& b);
  static bool StrictEquals(const Value& a, const Value& b);
  int Compare(const Value& a, const Value& b, bool case_sensitive, size_t pos);
  Value EvalUnary(const Node& n, const EnvPtr& env);
  Value EvalBinary(const Node& n, const EnvPtr& env);
  std::optional<Value> Arithmetic(const std::string& op, const Value& left, const Value& right,
                                  const Node& n);

  // A stable merge sort that stays in bounds whatever the comparator answers (NaN included).
  template <typename Less>
  static void StableSort(Array& items, Less less) {
    Array buffer(items.size());
    for (size_t width = 1; width < items.size(); width *= 2) {
      for (size_t lo = 0; lo < items.size(); lo += 2 * width) {
        const size_t mid = std::min(lo + width, items.size());
        const size_t hi = std::min(lo + 2 * width, items.size());
        size_t i = lo, j = mid, k = lo;
        while (i < mid && j < hi) buffer[k++] = less(items[j], items[i]) ? items[j++] : items[i++];
        while (i < mid) buffer[k++] = items[i++];
        while (j < hi) buffer[k++] = items[j++];
      }
      items.swap(buffer);
    }
  }

  // ---- calls: arguments, macros, call blocks (calls.cc) ----
  static void FindSpecial(const std::vector<NodePtr>& body, bool& kwargs, bool& varargs);
  void BindArguments(const std::string& display, const std::vector<NodePtr>& params,
                     const std::vector<NodePtr>& body, Array args, const EnvPtr& scope, size_t pos);
  Value EvalCallBlock(const Node& n, const EnvPtr& env);
  std::pair<Array, std::shared_ptr<Object>> EvalArguments(const std::vector<NodePtr>& nodes,
                                                          const EnvPtr& env);
  Value EvalCall(const Node& n, const EnvPtr& env);
  Value CallFunction(const Function& f, Array args, const EnvPtr& env, const Node& at);

  // ---- global functions (globals.cc) ----
  Value Range(const Array& args, const Node& at);
  Value StrftimeNow(const Array& args, const Node& at);
  Value MakeNamespace(Array args, const Node& at);

  // ---- member access, slicing and methods (members.cc) ----
  Value BoundMethod(FnKind kind, std::string name, const Value& self);
  static bool IsStringMethod(std::string_view name);
  static bool IsObjectMethod(std::string_view name);
  Value Builtin(const Value& object, const std::string& name);
  static Value StringAt(const std::string& s, double index);
  Value EvalMember(const Node& n, const EnvPtr& env);
  template <typename T>
  std::vector<T> Slice(const std::vector<T>& items, std::optional<double> start,
                       std::optional<double> stop, double step, size_t pos);
  Value EvalSlice(const Value& object, const Node& n, const EnvPtr& env);
  Value StringMethod(const std::string& name, const std::string& s, const Array& args,
                     const Node& at);
  Value Split(const std::string& s, const Array& args, const Node& at);
  Value Replace(const std::string& s, const Array& args, const Node& at);
  Value Items(const Value& object);
  Value ObjectMethod(const std::string& name, const Value& self, Array args, const Node& at);

  // ---- filters and tests (filters.cc) ----
  bool RunTest(const std::string& name, const Value& v, const Value* arg, const Node& at);
  static Value AttributePath(const Value& item, const std::string& path);
  std::string Escape(const std::string& s, size_t pos);
  std::string Indent(const std::string& s, const std::string& pad, bool first, bool blank,
                     size_t pos);
  static double Round(double x, double precision, const std::string& method);
  Value Join(const Value& operand, const std::string& sep, size_t pos);
  Value Unique(const Value& operand);
  [[noreturn]] void UnknownFilter(const Node& at, const std::string& name, const Value& v);
  Value ApplyFilter(const Value& operand, const Node& filter, const EnvPtr& env);
  Value ApplyNamedFilter(const Value& operand, const std::string& name, const Node& at);
  std::optional<Value> NamedArrayFilter(const Value& operand, const std::string& filter,
                                        const Node& at);
  std::optional<Value> NamedStringFilter(const Value& operand, const std::string& filter,
                                         const Node& at);
  Value ApplyCallFilter(const Value& operand, const std::string& name, const Node& call,
                        const EnvPtr& env);
  // A filter call's arguments; Option(i, key) is the i-th positional one, else keyword `key`.
  struct FilterArgs {
    Array args;
    std::shared_ptr<Object> kwargs;
    const Value* Option(size_t i, const char* key) const {
      if (i < args.size()) return &args[i];
      return kwargs->Find(key);
    }
  };
  Value ToJsonFilter(const Value& operand, const FilterArgs& f, const Node& at);
  Value IntFloatFilter(const Value& operand, const std::string& name, const FilterArgs& f,
                       const Node& at);
  Value SortFilter(const Array& items, const FilterArgs& f, const Node& at);
  Value SelectAttrFilter(const Array& items, const std::string& name, const FilterArgs& f,
                         const Node& call);
  Value MapFilter(const Array& items, const FilterArgs& f, const Node& at);
  Value IndentFilter(const Value& operand, const FilterArgs& f, const Node& at);
  void CheckIndent(double width, const Node& at) const;

  const Program& program_;
  const RenderOptions& options_;
  int depth_ = 0;
  size_t work_ = 0;    // spent of max_loop_iterations
  size_t effort_ = 0;  // spent of max_work
  std::vector<std::shared_ptr<Object>> namespaces_;
};

}  // namespace rlid::jinja::internal
