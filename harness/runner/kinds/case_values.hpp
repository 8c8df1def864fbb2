#pragma once
// Reading the values that the layout and mesh kinds share out of YAML: IntTuples written as
// ints, tuple strings or nested lists; int lists; and any node as JSON for params and messages.
#include <cstdint>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "case_kind.hpp"
#include "layout/int_tuple.hpp"
#include "layout/layout.hpp"
#include "layout/mesh_layout.hpp"

namespace meshgate::runner {

// Plain scalars become ints, numbers or booleans when they read as such; quoted ones stay strings.
nlohmann::json yaml_to_json(const YAML::Node& node);

// An int, a CuTe tuple string "(1,(1,2))", or a (nested) list. Throws meshgate::Error for
// malformed tuple text and InputError (through `at`) for anything else that is not an IntTuple.
IntTuple read_int_tuple(const YAML::Node& value, const CaseNode& at, std::string_view key);
// A CuTe layout string; meshgate::Error when the text is malformed.
Layout read_layout(const YAML::Node& value, const CaseNode& at, std::string_view key);
std::int64_t read_int(const YAML::Node& value, const CaseNode& at, std::string_view key);
std::vector<std::int64_t> read_int_list(const YAML::Node& value, const CaseNode& at,
                                        std::string_view key);
// A list whose items are (nested) lists of ints, kept as JSON for exact comparison.
nlohmann::json read_nested_ints(const YAML::Node& value, const CaseNode& at, std::string_view key);

// A RankTensor as nested JSON lists (one level per dim), e.g. [[0, 4], [1, 5]].
nlohmann::json rank_tensor_to_json(const RankTensor& t);

}  // namespace meshgate::runner
