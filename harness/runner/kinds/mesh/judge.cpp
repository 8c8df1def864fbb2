// Judging a mesh case's observables, meshgate's or another implementation's: against `expect`,
// and for an implementation of one layout model, as judging() decides for that model.

#include "kinds/mesh/mesh_case.hpp"

namespace meshgate::runner::mesh_kind {

const Judging& MeshCase::judging(LayoutModel answered) {
  auto it = judgings_.find(answered);
  if (it == judgings_.end()) it = judgings_.emplace(answered, make_judging(answered)).first;
  return it->second;
}

Judging MeshCase::make_judging(LayoutModel answered) const {
  Judging j;
  const std::vector<ObservableRef> expected = observable_refs(false);
  if (answered == model) {
    // The case's own model: every observable `expect` asks about, as in meshgate's own run.
    j.rejection = expects_rejection;
    for (const ObservableRef& ref : expected) j.judged.push_back(ref.name);
    if (compare_models) {
      std::string error;
      j.reference = observe_model(model, error);
    }
    add_unjudged(j, expected);
    return j;
  }
  const std::string own_name = to_string_model();
  const std::string their_name(to_string(answered));
  std::string own_error;
  std::string their_error;
  const std::optional<Observed> own = observe_model(model, own_error);
  // The other model as PyTorch ships it: the 2-level model with #172343's check.
  const std::optional<Observed> theirs =
      observe_model(answered, their_error, answered == LayoutModel::two_level);
  if (own.has_value() != theirs.has_value()) {
    j.why_not = own ? "meshgate's " + their_name + " model rejects the case (" +
                          shorten(their_error) + ") where the " + own_name +
                          " model it is written for accepts it"
                    : "the case expects the rejection of the " + own_name +
                          " model it is written for (" + shorten(own_error) +
                          "), and meshgate's " + their_name + " model accepts it";
    return j;
  }
  if (!theirs) {
    // Both reject: the rejection is judged, on the words of the exception, which must be
    // PyTorch's: meshgate's message follows them with an explanation in parentheses that no
    // other implementation prints.
    if (!expects_rejection) {
      j.why_not = "both of meshgate's layout models reject the case, which expects a result: " +
                  shorten(their_error);
    } else if (!expected_message.empty() &&
               pytorch_words(their_error).find(expected_message) == std::string::npos) {
      j.why_not =
          their_error.find(expected_message) == std::string::npos
              ? "both layout models reject the case, but meshgate's " + their_name +
                    " model not with the expected '" + expected_message + "': " +
                    shorten(their_error)
              : "the case expects words of meshgate's own explanation ('" + expected_message +
                    "'), which follows the exception's words in meshgate's message: " +
                    shorten(their_error);
    } else {
      j.rejection = true;
    }
    return j;
  }
  // Both accept: what the two models agree on is judged against expect.
  j.rejection = expects_rejection;
  j.reference = theirs;
  for (const ObservableRef& ref : expected) {
    if (ref.value(*own) == ref.value(*theirs)) {
      j.judged.push_back(ref.name);
    } else if (compare_models) {
      j.against_meshgate.push_back(ref.name);
    } else {
      j.model_dependent.push_back(ref.name);
    }
  }
  add_unjudged(j, expected);
  if (j.judged.empty() && j.against_meshgate.empty() && !j.rejection &&
      !j.model_dependent.empty()) {
    j.why_not = "every observable the case expects (" + join_names(j.model_dependent) +
                ") differs between meshgate's " + own_name + " model, which the case is "
                "written for, and its " + their_name + " model";
  }
  return j;
}

void MeshCase::add_unjudged(Judging& j, const std::vector<ObservableRef>& expected) const {
  if (compare_models) {
    if (j.reference) {
      for (const ObservableRef& ref : observable_refs(true)) {
        const bool in_expect =
            std::any_of(expected.begin(), expected.end(),
                        [&](const ObservableRef& e) { return e.name == ref.name; });
        if (!in_expect) j.against_meshgate.push_back(ref.name);
      }
    }
    j.unobservable.push_back(model_differences ? "model_differences"
                             : models_agree    ? "models_agree"
                                               : "compare_models");
    if (equal_to) j.unobservable.push_back("equal_to");
  }
  if (expect.warnings) {
    j.unobservable.push_back("warnings");
    if (j.judged.empty() && j.against_meshgate.empty() && j.model_dependent.empty() &&
        !j.rejection) {
      j.why_not = "expect.warnings counts the warnings of meshgate's DeviceMesh model; "
                  "warnings are no observable of the meshgate.impl/1 protocol";
    }
  }
}

std::string MeshCase::pytorch_words(const std::string& message) {
  if (message.empty() || message.back() != ')') return message;
  int depth = 0;
  for (std::size_t i = message.size(); i-- > 0;) {
    if (message[i] == ')') ++depth;
    if (message[i] == '(' && --depth == 0)
      return i > 0 && message[i - 1] == ' ' ? message.substr(0, i - 1) : message;
  }
  return message;
}

std::string MeshCase::join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string MeshCase::judging_note(const Judging& j, LayoutModel answered) const {
  const std::string their_name(to_string(answered));
  std::vector<std::string> parts;
  if (j.rejection && j.judged.empty()) parts.push_back("judged on the rejection");
  if (!j.judged.empty()) parts.push_back("judged on " + join_names(j.judged));
  if (!j.against_meshgate.empty()) {
    parts.push_back("judged against meshgate's " + their_name + " model (the side of the " +
                    "model comparison the implementation computes): " +
                    join_names(j.against_meshgate));
  }
  if (!j.model_dependent.empty()) {
    parts.push_back("not compared: " + join_names(j.model_dependent) +
                    " (the case is written for the " + to_string_model() +
                    " layout model and the implementation has " + their_name +
                    ", where meshgate's models give it another value)");
  }
  if (!j.unobservable.empty()) {
    parts.push_back("not compared: " + join_names(j.unobservable) +
                    " (no observable of the meshgate.impl/1 protocol)");
  }
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

Outcome MeshCase::judge_answer(const Observed& o, const Judging& j, LayoutModel answered) const {
  std::vector<std::string> mismatches;
  check_expectations(o, mismatches, [&](const std::string& name) {
    return std::find(j.judged.begin(), j.judged.end(), name) != j.judged.end();
  });
  for (const ObservableRef& ref : observable_refs(true)) {
    if (std::find(j.against_meshgate.begin(), j.against_meshgate.end(), ref.name) ==
        j.against_meshgate.end())
      continue;
    const nlohmann::json expected = ref.value(*j.reference);
    const nlohmann::json actual = ref.value(o);
    if (expected != actual) {
      mismatches.push_back(ref.name + " (meshgate's " + std::string(to_string(answered)) +
                           " model): expected " + shorten(expected.dump(), 400) + ", got " +
                           shorten(actual.dump(), 400));
    }
  }
  Outcome outcome;
  outcome.metrics["layout"] = to_string(o.layout);
  outcome.metrics["shape"] = o.shape;
  const bool plain = answered == model && j.against_meshgate.empty() &&
                     j.model_dependent.empty() && j.unobservable.empty();
  const std::string note = plain ? "" : judging_note(j, answered);
  if (!plain) {
    outcome.metrics["model_judging"] = {{"case_model", to_string_model()},
                                        {"impl_model", to_string(answered)},
                                        {"judged", j.judged},
                                        {"against_meshgate", j.against_meshgate},
                                        {"not_compared", j.model_dependent},
                                        {"not_observable", j.unobservable},
                                        {"note", note}};
  }
  if (!mismatches.empty()) {
    outcome.status = Status::fail;
    outcome.message = join(mismatches) + (note.empty() ? "" : " [" + note + "]");
  }
  return outcome;
}

std::string MeshCase::join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

Outcome MeshCase::judge(const Observed& o, Outcome outcome, std::vector<std::string> mismatches) const {
  check_expectations(o, mismatches);
  outcome.metrics["layout"] = to_string(o.layout);
  outcome.metrics["shape"] = o.shape;
  if (!mismatches.empty()) {
    outcome.status = Status::fail;
    outcome.message = join(mismatches);
  }
  return outcome;
}

void MeshCase::check_expectations(const Observed& o, std::vector<std::string>& mismatches,
                        const std::function<bool(const std::string&)>& judged) const {
  const auto on = [&](const std::string& what) { return !judged || judged(what); };
  auto check = [&](const std::string& what, const nlohmann::json& expected,
                   const nlohmann::json& actual) {
    if (on(what) && expected != actual)
      mismatches.push_back(what + ": expected " + shorten(expected.dump(), 400) + ", got " +
                           shorten(actual.dump(), 400));
  };
  if (expect.layout && on("layout") && !(o.layout == *expect.layout)) {
    mismatches.push_back("layout: expected " + to_string(*expect.layout) + ", got " +
                         to_string(o.layout));
  }
  if (expect.shape) check("shape", *expect.shape, o.shape);
  if (expect.names) check("names", *expect.names, o.names);
  if (expect.groups) check("groups", *expect.groups, o.groups.value_or(nlohmann::json()));
  for (const auto& [rank, expected] : expect.coordinates)
    check("coordinates of rank " + std::to_string(rank), expected, o.coordinates.at(rank));
  for (const auto& [rank, expected] : expect.mesh_for_rank)
    check("mesh_for_rank of rank " + std::to_string(rank), expected, o.mesh_for_rank.at(rank));
  if (expect.submeshes && on("submeshes")) {
    if (!o.submeshes) {
      mismatches.push_back("submeshes: expected " + shorten(expect.submeshes->dump()) +
                           ", but no submeshes op ran");
    } else {
      check("submeshes", *expect.submeshes, *o.submeshes);
    }
  }
  if (expect.warnings && o.warnings) {
    const std::vector<std::string>& warnings = *o.warnings;
    if (static_cast<std::int64_t>(warnings.size()) != *expect.warnings) {
      mismatches.push_back("warnings: expected " + std::to_string(*expect.warnings) + ", got " +
                           std::to_string(warnings.size()) +
                           (warnings.empty() ? "" : " (" + join(warnings) + ")"));
    }
  }
}

}  // namespace meshgate::runner::mesh_kind
