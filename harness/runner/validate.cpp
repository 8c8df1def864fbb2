#include "validate.hpp"

#include <exception>

#include "diagnostics.hpp"

namespace meshgate::runner {

const std::vector<std::string>& common_case_keys() {
  static const std::vector<std::string> keys = {"name",   "kind",         "tags",
                                                "matrix", "expect_error", "perf"};
  return keys;
}

namespace {

std::optional<PerfSpec> read_perf(CaseNode& node) {
  if (!node.has("perf")) return std::nullopt;
  const YAML::Node value = node.raw("perf");
  if (value.IsNull()) return std::nullopt;
  CaseNode perf = node.child("perf");
  PerfSpec spec;
  // Known up front, so a typo next to a bad value still gets its suggestion.
  for (const char* key : {"warmup", "iters", "runs"}) perf.has(key);
  const auto read_count = [&](std::string_view key, int& out, int minimum) {
    if (const std::optional<int> v = perf.optional<int>(key)) {
      if (*v < minimum) {
        perf.fail(key,
                  "must be at least " + std::to_string(minimum) + ", got " + std::to_string(*v));
      }
      out = *v;
    }
  };
  read_count("warmup", spec.warmup, 0);
  read_count("iters", spec.iters, 1);
  read_count("runs", spec.runs, 1);
  return spec;
}

void read_expect_error(CaseNode& node, PlannedCase& planned) {
  const YAML::Node value = node.raw("expect_error");
  if (!value.IsDefined() || value.IsNull()) return;
  if (!value.IsScalar()) {
    node.fail("expect_error", "expected true, false or a substring of the error message, got " +
                                  describe_node(value));
  }
  // A plain true/false is a flag; anything else (including a quoted "true") is a substring.
  bool flag = false;
  if (value.Tag() != "!" && YAML::convert<bool>::decode(value, flag)) {
    planned.expect_error = flag;
    return;
  }
  if (value.Scalar().empty())
    node.fail("expect_error", "an empty substring matches anything; write true");
  planned.expect_error = true;
  planned.expected_message = value.Scalar();
}

}  // namespace

PlannedCases prepare_cases(std::vector<CaseSpec> specs, const std::vector<KindEntry>& kinds) {
  PlannedCases out;
  for (const CaseSpec& spec : specs) {
    CaseNode node(spec.node, spec.file, spec.id);
    // Constructed, not assigned: assigning a YAML::Node rewrites the node it refers to.
    PlannedCase planned{spec, false, {}, std::nullopt, nullptr};
    bool parsed = false;
    try {
      // Already checked while loading; reading them marks them known.
      node.raw("name");
      node.raw("tags");
      node.raw("matrix");
      node.raw("kind");
      const KindEntry* entry = nullptr;
      for (const KindEntry& k : kinds) {
        if (k.name == spec.kind) entry = &k;
      }
      if (entry == nullptr) {
        std::vector<std::string> names;
        std::string known;
        for (const KindEntry& k : kinds) {
          names.emplace_back(k.name);
          known += (known.empty() ? "" : ", ") + std::string(k.name);
        }
        node.fail("kind", "unknown kind '" + spec.kind + "'" + did_you_mean(spec.kind, names) +
                              "; known kinds: " + (known.empty() ? "none" : known));
      }
      read_expect_error(node, planned);
      planned.perf = read_perf(node);
      try {
        planned.prepared = entry->parse(node, planned.expect_error);
      } catch (const InputError&) {
        throw;
      } catch (const std::exception& e) {
        // The kind let a library error escape while reading its keys.
        node.fail("kind", std::string("the ") + spec.kind + " kind rejected the case: " + e.what());
      }
      if (!planned.prepared) node.fail("kind", "the " + spec.kind + " kind prepared no case");
      parsed = true;
    } catch (const InputError& e) {
      out.errors.emplace_back(e.what());
    }
    // After an early stop the kind never asked for its later keys: only likely typos are
    // reported then, not every key it did not reach.
    const std::vector<std::string> unknown = node.unknown_key_errors(!parsed);
    out.errors.insert(out.errors.end(), unknown.begin(), unknown.end());
    if (parsed && unknown.empty()) out.cases.push_back(std::move(planned));
  }
  return out;
}

}  // namespace meshgate::runner
