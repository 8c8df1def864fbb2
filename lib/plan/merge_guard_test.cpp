// The merge pass's guards against a population of generated redistributions, checked at every mesh
// coordinate: a run of all_gathers is merged exactly when one collective on the flattened group
// moves every element where the run's per-dim collectives do (judged here element by element, by
// replaying the executor's pad / concatenate / trim on index lists), a run of reduce_scatters
// exactly when that holds and its outermost logical size divides by the group (the reference's
// rule, docs/kinds.md: uneven_tensor_shape), and every group's ranks agree on the collectives they
// issue.
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "plan/plan.hpp"

namespace meshgate {
namespace {

using Dims = std::vector<std::int64_t>;
using Indices = std::vector<std::int64_t>;  // element indices along one tensor dim; -1 = padding

// The piece of `whole` that member `index` of `parts` holds under torch.chunk.
Indices chunk_of(const Indices& whole, std::int64_t parts, std::int64_t index) {
  const ChunkRange r = chunk_range(static_cast<std::int64_t>(whole.size()), parts, index);
  return {whole.begin() + r.offset, whole.begin() + r.offset + r.length};
}

// The pieces of iota(extent) that the members of a group (row-major over `sizes`, the first
// outermost) hold after splitting it with torch.chunk over `sizes` one after the other.
std::vector<Indices> nested_pieces(std::int64_t extent, const Dims& sizes) {
  Indices all(static_cast<std::size_t>(extent));
  std::iota(all.begin(), all.end(), 0);
  std::vector<Indices> pieces = {all};
  for (std::int64_t n : sizes) {
    std::vector<Indices> next;
    for (const Indices& p : pieces) {
      for (std::int64_t j = 0; j < n; ++j) next.push_back(chunk_of(p, n, j));
    }
    pieces = std::move(next);
  }
  return pieces;
}

// Whether one collective over the flattened group of `sizes` leaves the same elements on every
// member as the per-dim collectives, replaying what the executor does with index lists.
//  - all_gather of `extent` (the outermost logical size) from the nested pieces: pad each piece
//    to ceil(extent / N), concatenate in row-major order, trim to extent; the per-dim gathers
//    rebuild iota(extent), so the flat one must too.
//  - reduce_scatter of a local tensor of `extent`: the per-dim steps leave each member its
//    nested piece; the flat one its torch.chunk piece of N.
bool flat_collective_is_safe(StepKind kind, std::int64_t extent, const Dims& sizes) {
  const std::vector<Indices> nested = nested_pieces(extent, sizes);
  const auto n = static_cast<std::int64_t>(nested.size());
  Indices all(static_cast<std::size_t>(extent));
  std::iota(all.begin(), all.end(), 0);
  if (kind == StepKind::all_gather) {
    const std::int64_t full = padded_chunk(extent, n);
    Indices gathered;
    for (const Indices& p : nested) {
      if (static_cast<std::int64_t>(p.size()) > full) return false;  // would not fit the pad
      Indices padded = p;
      padded.resize(static_cast<std::size_t>(full), -1);
      gathered.insert(gathered.end(), padded.begin(), padded.end());
    }
    gathered.resize(static_cast<std::size_t>(extent));
    return gathered == all;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    if (chunk_of(all, n, i) != nested[static_cast<std::size_t>(i)]) return false;
  }
  return true;
}

const Placement S0 = Placement::shard(0);
const Placement S1 = Placement::shard(1);
const Placement R = Placement::replicate();
const Placement Psum = Placement::partial(ReduceOp::sum);
const Placement Pavg = Placement::partial(ReduceOp::avg);

// One generated redistribution: a 2-D or 3-D mesh with sizes 1..4 on which every ascending set
// of two or more dims is flattened, a 1-D or 2-D tensor of 0..9 per dim, and random placements.
struct Problem {
  DeviceMesh mesh;
  DTensorSpec src;
  DTensorSpec dst;
};

std::vector<Problem> generated_problems(std::size_t count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Problem> out;
  while (out.size() < count) {
    const std::size_t nd = 2 + rng() % 2;
    Dims shape;
    for (std::size_t m = 0; m < nd; ++m) shape.push_back(1 + static_cast<std::int64_t>(rng() % 4));
    const std::vector<std::string> all_names = {"A", "B", "C"};
    DeviceMesh mesh = DeviceMesh::create(
        shape, std::vector<std::string>(all_names.begin(), all_names.begin() + nd));
    for (std::uint32_t mask = 1; mask < (1u << nd); ++mask) {
      std::vector<std::string> dims;
      for (std::size_t m = 0; m < nd; ++m) {
        if (mask >> m & 1) dims.push_back(all_names[m]);
      }
      if (dims.size() < 2) continue;
      try {
        mesh.slice(dims).flatten();
      } catch (const Error&) {
        // a layout already registered under another name (size-1 dims coalesce away)
      }
    }
    const std::size_t rank = 1 + rng() % 2;
    Shape tensor;
    for (std::size_t d = 0; d < rank; ++d) tensor.push_back(static_cast<std::int64_t>(rng() % 10));
    std::vector<Placement> choices = {S0, R, Psum, Pavg, S0};
    if (rank == 2) choices.push_back(S1);
    std::vector<Placement> from, to;
    for (std::size_t m = 0; m < nd; ++m) {
      from.push_back(choices[rng() % choices.size()]);
      to.push_back(choices[rng() % choices.size()]);
    }
    try {
      DTensorSpec src = DTensorSpec::create(mesh, from, tensor);
      DTensorSpec dst = DTensorSpec::create(mesh, to, tensor);
      (void)plan_redistribute(src, dst);  // S -> P, P(x) -> P(y), mixed partials: not a problem
      out.push_back({std::move(mesh), std::move(src), std::move(dst)});
    } catch (const Error&) {
    }
  }
  return out;
}

std::vector<Dims> all_coordinates(const Dims& shape) {
  std::vector<Dims> out;
  Dims c(shape.size(), 0);
  for (;;) {
    out.push_back(c);
    std::size_t i = shape.size();
    while (i-- > 0) {
      if (++c[i] < shape[i]) break;
      c[i] = 0;
    }
    if (i == static_cast<std::size_t>(-1)) return out;
  }
}

TEST(MergeGuards, MergeExactlyTheRunsWhoseFlatCollectiveIsSafe) {
  const std::vector<Problem> problems = generated_problems(3000, 20260301);
  struct Tally {
    int merged = 0, refused_uneven = 0, refused_but_safe = 0, merged_but_unsafe = 0;
    int safe_but_indivisible = 0;  // reduce_scatters the reference's rule refuses, safe or not
  };
  std::map<StepKind, Tally> tally;
  for (const Problem& p : problems) {
    const Dims shape = p.mesh.shape();
    for (const Dims& coord : all_coordinates(shape)) {
      const Plan plan = plan_redistribute(p.src, p.dst, coord);
      for (const RunDecision& run : plan.runs) {
        if (run.kind == StepKind::all_reduce) continue;
        if (run.reason != MergeReason::merged && run.reason != MergeReason::uneven_tensor_shape) {
          continue;
        }
        const TransformStep& first = plan.unmerged[run.steps.front()];
        const auto d = static_cast<std::size_t>(
            run.kind == StepKind::all_gather ? first.src_tensor_dim : first.dst_tensor_dim);
        Dims sorted = run.mesh_dims;
        std::sort(sorted.begin(), sorted.end());
        Dims sizes;
        for (std::int64_t m : sorted) sizes.push_back(shape[static_cast<std::size_t>(m)]);
        // all_gather: the size the outermost gather rebuilds; reduce_scatter: the local tensor.
        std::int64_t outer = 0;
        for (std::size_t k : run.steps) outer = std::max(outer, plan.unmerged[k].logical_shape[d]);
        const std::int64_t extent = run.kind == StepKind::all_gather ? outer : first.input_shape[d];
        const bool safe = flat_collective_is_safe(run.kind, extent, sizes);
        std::int64_t n = 1;
        for (std::int64_t size : sizes) n *= size;
        const bool divisible = run.kind == StepKind::all_gather || outer % n == 0;
        Tally& t = tally[run.kind];
        if (safe && !divisible) ++t.safe_but_indivisible;
        if (run.reason == MergeReason::merged) {
          ++t.merged;
          if (!safe || !divisible) {
            ++t.merged_but_unsafe;
            ADD_FAILURE() << (safe ? "merge the reference refuses: " : "unsafe merge: ")
                          << to_string(p.src.placements) << " -> " << to_string(p.dst.placements)
                          << " shape " << p.src.shape.front() << " on "
                          << to_string(p.mesh.layout());
          }
        } else {
          ++t.refused_uneven;
          if (safe && divisible) ++t.refused_but_safe;
        }
      }
    }
  }
  for (const auto& [kind, t] : tally) {
    std::cout << "[ population ] " << to_string(kind) << ": " << t.merged << " merged, "
              << t.refused_uneven << " refused as uneven, of which " << t.refused_but_safe
              << " were safe and divisible, " << t.safe_but_indivisible
              << " safe but refused by the divisibility rule\n";
    EXPECT_EQ(t.refused_but_safe, 0) << to_string(kind) << " merges refused although safe";
    EXPECT_EQ(t.merged_but_unsafe, 0) << to_string(kind);
  }
  // The population must exercise both decisions of both guards.
  EXPECT_GT(tally[StepKind::all_gather].merged, 0);
  EXPECT_GT(tally[StepKind::all_gather].refused_uneven, 0);
  EXPECT_GT(tally[StepKind::reduce_scatter].merged, 0);
  EXPECT_GT(tally[StepKind::reduce_scatter].refused_uneven, 0);
  // The reference's rule refuses some reduce_scatters whose splits coincide (7 rows over 2x4).
  EXPECT_GT(tally[StepKind::reduce_scatter].safe_but_indivisible, 0);
  EXPECT_EQ(tally[StepKind::all_gather].safe_but_indivisible, 0);
}

// A collective is issued by every rank of its group: the ranks that share their coordinates
// outside the collective's mesh dims. They must issue the same collectives on that group in the
// same order, or one of them waits forever. Ranks of different groups may plan differently
// (a merge that is safe on one B x C group and not on another), but only there.
TEST(MergeGuards, EveryGroupsRanksIssueTheSameCollectives) {
  const std::vector<Problem> problems = generated_problems(3000, 20260302);
  int rank_dependent = 0;
  int checked_groups = 0;
  for (const Problem& p : problems) {
    const Dims shape = p.mesh.shape();
    const std::vector<Dims> coords = all_coordinates(shape);
    std::map<Dims, std::vector<std::string>> comm_list;  // per coordinate
    bool unsafe_somewhere = false;  // a merge refused because its flat split moves elements
    // (sorted dims, outside coordinates) -> member coordinate -> what it issues there
    std::map<std::pair<Dims, Dims>, std::map<Dims, std::vector<std::string>>> issued;
    for (const Dims& coord : coords) {
      const Plan plan = plan_redistribute(p.src, p.dst, coord);
      comm_list[coord] = comm_strings(plan.steps, p.mesh);
      for (const RunDecision& run : plan.runs) {
        unsafe_somewhere = unsafe_somewhere || run.reason == MergeReason::uneven_tensor_shape;
      }
      for (const TransformStep& s : plan.steps) {
        if (!is_collective(s.kind) || s.group_size <= 1) continue;
        Dims dims = s.mesh_dims.to_vector();
        std::sort(dims.begin(), dims.end());
        Dims outside = coord;
        for (std::int64_t m : dims) outside[static_cast<std::size_t>(m)] = -1;
        issued[{dims, outside}][coord].push_back(to_string(s, p.mesh));
      }
    }
    for (const auto& [group, by_member] : issued) {
      ++checked_groups;
      const std::vector<std::string>& first = by_member.begin()->second;
      for (const Dims& coord : coords) {
        bool member = true;
        for (std::size_t m = 0; m < coord.size(); ++m) {
          if (group.second[m] != -1 && group.second[m] != coord[m]) member = false;
        }
        if (!member) continue;
        const auto it = by_member.find(coord);
        const std::vector<std::string> none;
        EXPECT_EQ(it == by_member.end() ? none : it->second, first)
            << to_string(p.src.placements) << " -> " << to_string(p.dst.placements) << " on "
            << to_string(p.mesh.layout());
      }
    }
    std::set<std::vector<std::string>> distinct;
    for (const auto& [coord, list] : comm_list) distinct.insert(list);
    if (distinct.size() > 1) {
      ++rank_dependent;
      // Only the evenness guard reads the coordinate, and it refuses only unsafe merges: plans
      // differ between ranks only where a merge would move elements on some of them.
      EXPECT_TRUE(unsafe_somewhere) << to_string(p.src.placements) << " -> "
                                    << to_string(p.dst.placements);
    }
  }
  std::cout << "[ population ] " << problems.size() << " problems, " << checked_groups
            << " groups checked; plans differ between ranks in " << rank_dependent << "\n";
  EXPECT_GT(checked_groups, 1000);
}

}  // namespace
}  // namespace meshgate
