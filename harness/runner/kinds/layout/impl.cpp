// The layout kind handed to another implementation (docs/impl-protocol.md): the op and its
// arguments, and the result it answers.

#include "kinds/layout/layout_case.hpp"

namespace meshgate::runner::layout_kind {

std::optional<nlohmann::json> LayoutCase::impl_request(const std::filesystem::path&, std::string&) {
  nlohmann::json args = nlohmann::json::array();
  for (const Arg& arg : args_) {
    if (const auto* l = std::get_if<Layout>(&arg)) {
      args.push_back(to_string(*l));
    } else if (const auto* t = std::get_if<IntTuple>(&arg)) {
      args.push_back(t->is_int() ? nlohmann::json(t->value()) : nlohmann::json(to_string(*t)));
    } else if (const auto* i = std::get_if<std::int64_t>(&arg)) {
      args.push_back(*i);
    } else {
      args.push_back(std::get<std::vector<std::int64_t>>(arg));
    }
  }
  return nlohmann::json{{"op", op_.name}, {"args", std::move(args)}};
}

Outcome LayoutCase::check_observables(const nlohmann::json& observables,
                          const std::filesystem::path&) {
  return judge(read_observed(observables));
}

Value LayoutCase::read_observed(const nlohmann::json& observables) const {
  const std::string op(op_.name);
  if (!observables.is_object() || !observables.contains("result")) {
    throw ImplFailure("answered no 'result' for the " + op +
                      " op (observables: " + observables.dump().substr(0, 200) + ")");
  }
  const nlohmann::json& r = observables["result"];
  const auto wrong = [&](const std::string& wanted, const std::string& why = "") {
    return ImplFailure("answered result " + r.dump().substr(0, 200) + " for the " + op +
                       " op, which gives " + wanted + (why.empty() ? "" : ": " + why));
  };
  switch (op_.result) {
    case ResultType::layout:
      if (!r.is_string()) throw wrong("a layout in CuTe notation (a string)");
      try {
        return parse_layout(r.get<std::string>());
      } catch (const meshgate::Error& e) {
        throw wrong("a layout in CuTe notation", e.what());
      }
    case ResultType::int_tuple:
      if (r.is_number_integer()) return IntTuple(r.get<std::int64_t>());
      if (!r.is_string()) throw wrong("an int tuple (an integer or a string in CuTe notation)");
      try {
        return parse_int_tuple(r.get<std::string>());
      } catch (const meshgate::Error& e) {
        throw wrong("an int tuple in CuTe notation", e.what());
      }
    case ResultType::integer:
      if (!r.is_number_integer()) throw wrong("an integer");
      return r.get<std::int64_t>();
    case ResultType::boolean:
      if (!r.is_boolean()) throw wrong("a boolean");
      return r.get<bool>();
    case ResultType::int_lists: {
      const std::size_t depth = rank_list_depth(op_, args_);
      if (!nested_to_depth(r, depth)) {
        throw wrong("ranks nested " + std::to_string(depth) + (depth == 1 ? " list" : " lists") +
                    " deep");
      }
      return r;
    }
  }
  throw std::logic_error("unhandled result type");
}

}  // namespace meshgate::runner::layout_kind
