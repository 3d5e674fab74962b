// The server side of the external-env protocol (envs/external/env_server.h).
#include "envs/external/env_server.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/log.h"
#include "core/strings.h"
#include "envs/external/external.h"

namespace rlid::envs {
namespace {

using json = nlohmann::json;

// A request the server refuses, with its protocol-2 error code.
struct Refusal : std::runtime_error {
  Refusal(std::string c, const std::string& message)
      : std::runtime_error(message), code(std::move(c)) {}
  std::string code;
};

json MenuJson(const Menu& menu) {
  json items = json::array();
  for (const auto& it : menu.items) {
    std::vector<std::string> others(it.realisations.begin() + 1, it.realisations.end());
    items.push_back({{"action", it.action},
                     {"command", it.command},
                     {"realisations", others},
                     {"afterstate", it.afterstate},
                     {"afterstate_hash", fmt::format("{:016x}", it.afterstate_hash)}});
  }
  return items;
}

void PutState(json& reply, const State& s) {
  reply["observation"] = s.Observation();
  reply["state_hash"] = fmt::format("{:016x}", s.Hash());
  reply["terminal"] = s.IsTerminal();
  if (!s.IsTerminal()) reply["menu"] = MenuJson(s.CompileMenu());
  if (const auto* f = dynamic_cast<const FactSource*>(&s)) reply["facts"] = f->Facts();
}

// The versions a hello offers: "protocols" (protocol 2 clients), else "protocol".
std::vector<int> Offered(const json& req) {
  std::vector<int> out;
  if (req.contains("protocols") && req["protocols"].is_array()) {
    for (const auto& v : req["protocols"])
      if (v.is_number_integer()) out.push_back(v.get<int>());
  } else if (req.contains("protocol") && req["protocol"].is_number_integer()) {
    out.push_back(req["protocol"].get<int>());
  }
  return out;
}

}  // namespace

struct EnvServer::Impl {
  const Env& env;
  EnvServerOptions options;
  bool oracle = false;
  int protocol = 0;  // agreed in hello
  std::map<int64_t, std::unique_ptr<State>> states;
  int64_t next = 0;

  State& Get(const json& req) {
    const int64_t h = req.at("handle").get<int64_t>();
    auto it = states.find(h);
    if (it == states.end())
      throw Refusal("validation_error", fmt::format("no state with handle {}", h));
    return *it->second;
  }

  json Hello(const json& req) {
    const std::vector<int> offered = Offered(req);
    protocol = 0;
    for (int v : offered)
      if (v >= 1 && v <= options.max_protocol) protocol = std::max(protocol, v);
    if (protocol == 0)
      throw Refusal("validation_error",
                    fmt::format("this server speaks protocol 1 to {}, the client offered [{}]",
                                options.max_protocol, fmt::join(offered, ", ")));
    const EnvInfo info = env.Info();
    std::vector<std::string> caps = {"clone", "restore", "close", "compile"};
    if (oracle) caps.push_back("oracle");
    if (protocol >= 2) caps.push_back("metadata");
    return {{"protocol", protocol},          {"name", info.name},
            {"summary", info.summary},       {"instructions", env.Instructions()},
            {"step_limit", info.step_limit}, {"deterministic", info.deterministic},
            {"capabilities", caps}};
  }

  json Step(const json& req) {
    json reply = json::object();
    State& s = Get(req);
    const auto a = req.at("action").get<ActionId>();
    const auto legal = s.LegalActions();
    if (std::find(legal.begin(), legal.end(), a) == legal.end())
      throw Refusal("validation_error", fmt::format("action {} is not legal here", a));
    const StepOutcome o = s.Apply(a);
    if (options.step_delay_ms > 0)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(options.step_delay_ms));
    reply["reward"] = o.reward;
    reply["success"] = o.success;
    reply["truncated"] = o.truncated;
    PutState(reply, s);
    if (protocol >= 2) {  // Gymnasium's pair: ended by the rules, or cut by a limit
      reply.erase("terminal");
      reply["terminated"] = o.terminal && !o.truncated;
    } else {
      reply["terminal"] = o.terminal;
    }
    if (o.truncated)
      if (const auto* cut = dynamic_cast<const CutState*>(&s); cut && cut->WasCut())
        reply["menu"] = MenuJson(cut->MenuAtCut());
    return reply;
  }

  json Handle(const json& req) {
    if (!req.is_object() || !req.contains("op") || !req["op"].is_string())
      throw Refusal("validation_error", "a request must be an object with a string 'op'");
    const std::string op = req["op"].get<std::string>();
    if (op == "hello") return Hello(req);
    if (protocol == 0) throw Refusal("validation_error", "the first message must be hello");
    json reply = json::object();
    if (op == "reset") {
      auto s = env.NewState(req.at("seed").get<uint64_t>());
      reply["handle"] = ++next;
      PutState(reply, *s);
      if (protocol >= 2) {  // version 2 names it as Gymnasium does
        reply.erase("terminal");
        reply["terminated"] = s->IsTerminal();
      }
      states[next] = std::move(s);
    } else if (op == "step") {
      return Step(req);
    } else if (op == "compile") {
      const CompileResult r = Get(req).Compile(req.at("text").get<std::string>());
      if (r.valid())
        reply["action"] = r.action;
      else
        reply["invalid"] = r.reason;
    } else if (op == "clone") {
      auto c = Get(req).Clone();
      reply["handle"] = ++next;
      states[next] = std::move(c);
    } else if (op == "restore") {
      Get(req);  // the handle restored must exist
      auto from = states.find(req.at("from").get<int64_t>());
      if (from == states.end())
        throw Refusal("validation_error", "no state with the 'from' handle");
      states[req.at("handle").get<int64_t>()] = from->second->Clone();
    } else if (op == "close") {
      states.erase(req.at("handle").get<int64_t>());
    } else if (op == "oracle" && oracle) {
      const auto& o = dynamic_cast<const OracleState&>(Get(req));
      reply["actions"] = o.OptimalActions();
      reply["return"] = o.OptimalReturn();
    } else if (op == "metadata" && protocol >= 2) {
      reply = {{"name", env.Info().name},
               {"version", VersionString()},
               {"packages", {{"rlid", VersionString()}}},
               {"description", "a built-in rlid env served by `rlid env serve`"}};
    } else {
      throw Refusal("unknown_op", fmt::format("unknown op '{}'", op));
    }
    return reply;
  }
};

EnvServer::EnvServer(const Env& env, EnvServerOptions options)
    : impl_(std::make_unique<Impl>(Impl{env, options})) {
  impl_->oracle = dynamic_cast<const OracleState*>(env.NewState(0).get()) != nullptr;
}
EnvServer::~EnvServer() = default;

std::string EnvServer::Handle(const std::string& line) {
  json id;
  json reply;
  std::string code, message;
  try {
    const json req = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (req.is_discarded()) throw Refusal("invalid_json", "the request is not JSON");
    if (req.is_object() && req.contains("id")) id = req["id"];
    reply = impl_->Handle(req);
  } catch (const Refusal& e) {
    code = e.code, message = e.what();
  } catch (const json::exception& e) {  // a missing or mistyped request field
    code = "validation_error", message = e.what();
  } catch (const std::exception& e) {  // the env's own code failed
    code = "execution_error", message = e.what();
  }
  if (!code.empty())
    reply = impl_->protocol >= 2 || (impl_->options.max_protocol >= 2 && impl_->protocol == 0)
                ? json{{"error", {{"code", code}, {"message", message}}}}
                : json{{"error", message}};
  reply["id"] = id;
  return reply.dump();
}

int64_t ServeEnv(const Env& env, std::istream& in, std::ostream& out, EnvServerOptions options) {
  EnvServer server(env, options);
  int64_t served = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (Trim(line).empty()) continue;
    out << server.Handle(line) << "\n" << std::flush;
    ++served;
  }
  return served;
}

}  // namespace rlid::envs
