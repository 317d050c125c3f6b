// Implementation of preprocess/plan_verify.hpp. Deliberately shares no code with the builder:
// neighbor and transition sets come from the dataset's CSR through the plan's permutation, and
// the slot state of every GPU is replayed from the plan's load and leave lists.
#include "preprocess/plan_verify.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.hpp"
#include "common/log.hpp"

namespace sluice {
namespace {

struct Violation {
  std::string message;
};

template <typename... Args>
[[noreturn]] void violation(Args&&... args) {
  throw Violation{cat(std::forward<Args>(args)...)};
}

#define SLUICE_VERIFY(cond, ...)         \
  do {                                   \
    if (!(cond)) violation(__VA_ARGS__); \
  } while (0)

std::string chunk_name(int c, int p) {
  return cat("chunk (batch ", c, ", partition ", p, ")");
}

class Verifier {
 public:
  Verifier(const Dataset& d, const Plan& plan) : d_(d), plan_(plan), n_(d.num_nodes) {}

  void run() {
    check_header();
    check_permutation();
    check_ranges();
    replay();
    check_stats();
  }

 private:
  void check_header() {
    SLUICE_VERIFY(plan_.num_nodes == n_, "plan has ", plan_.num_nodes, " vertices, dataset ", n_);
    SLUICE_VERIFY(plan_.num_dataset_edges == d_.num_edges(), "plan was built for ",
                  plan_.num_dataset_edges, " edges, dataset has ", d_.num_edges());
    SLUICE_VERIFY(plan_.partitions >= 1 && plan_.chunks >= 1, "bad P or C");
    SLUICE_VERIFY(plan_.chunk_plans.size() == std::size_t(plan_.partitions) * plan_.chunks,
                  "plan holds ", plan_.chunk_plans.size(), " chunks, expected P x C");
    SLUICE_VERIFY(plan_.partition_offsets.size() == std::size_t(plan_.partitions) + 1 &&
                      plan_.transition_rows.size() == std::size_t(plan_.partitions) &&
                      plan_.remote_rows.size() == std::size_t(plan_.partitions),
                  "per-partition arrays have the wrong length");
  }

  void check_permutation() {
    SLUICE_VERIFY(
        plan_.new_to_old.size() == std::size_t(n_) && plan_.old_to_new.size() == std::size_t(n_),
        "permutation arrays have the wrong length");
    std::vector<char> seen(n_, 0);
    for (vertex_t v = 0; v < n_; ++v) {
      const vertex_t old = plan_.new_to_old[v];
      SLUICE_VERIFY(old >= 0 && old < n_ && !seen[old], "new_to_old is not a permutation at ", v);
      seen[old] = 1;
      SLUICE_VERIFY(plan_.old_to_new[old] == v, "old_to_new[", old, "] is ", plan_.old_to_new[old],
                    ", expected ", v);
    }
    const auto& offsets = plan_.partition_offsets;
    SLUICE_VERIFY(offsets.front() == 0 && offsets.back() == n_, "partition_offsets do not span");
    owner_.assign(n_, -1);
    for (int p = 0; p < plan_.partitions; ++p) {
      SLUICE_VERIFY(offsets[p] <= offsets[p + 1], "partition_offsets decrease at ", p);
      for (vertex_t v = offsets[p]; v < offsets[p + 1]; ++v) owner_[v] = p;
    }
  }

  // Every vertex is a destination of exactly one chunk of its own partition; ranges tile.
  void check_ranges() {
    const int P = plan_.partitions;
    const int C = plan_.chunks;
    std::vector<int> destination_count(n_, 0);
    for (int p = 0; p < P; ++p) {
      std::vector<const ChunkPlan*> by_range(C, nullptr);
      for (int c = 0; c < C; ++c) {
        const ChunkPlan& chunk = plan_.chunk(c, p);
        SLUICE_VERIFY(chunk.partition == p && chunk.batch == c, chunk_name(c, p),
                      " is stored at the wrong position");
        SLUICE_VERIFY(chunk.range >= 0 && chunk.range < C && !by_range[chunk.range],
                      chunk_name(c, p), ": range ", chunk.range, " is out of range or repeated");
        by_range[chunk.range] = &chunk;
        SLUICE_VERIFY(
            chunk.dst_begin >= 0 && chunk.dst_begin <= chunk.dst_end && chunk.dst_end <= n_,
            chunk_name(c, p), ": bad destination range");
        for (vertex_t v = chunk.dst_begin; v < chunk.dst_end; ++v) {
          SLUICE_VERIFY(owner_[v] == p, chunk_name(c, p), ": destination ", v,
                        " belongs to partition ", owner_[v]);
          ++destination_count[v];
        }
      }
      vertex_t expected_begin = plan_.partition_offsets[p];
      for (int r = 0; r < C; ++r) {
        SLUICE_VERIFY(by_range[r]->dst_begin == expected_begin, "partition ", p, " range ", r,
                      " starts at ", by_range[r]->dst_begin, ", expected ", expected_begin);
        expected_begin = by_range[r]->dst_end;
      }
    }
    for (vertex_t v = 0; v < n_; ++v)
      SLUICE_VERIFY(destination_count[v] == 1, "vertex ", v, " is a destination in ",
                    destination_count[v], " chunks, expected exactly 1");
  }

  // The expected row of renumbered destination v: v itself, then its in-edges' sources.
  template <typename F>
  void for_each_expected_entry(vertex_t v, F f) const {
    f(v);
    const vertex_t old = plan_.new_to_old[v];
    for (edge_t e = d_.indptr[old]; e < d_.indptr[old + 1]; ++e)
      if (d_.indices[e] != old) f(plan_.old_to_new[d_.indices[e]]);
  }

  void replay() {
    const int P = plan_.partitions;
    const int C = plan_.chunks;
    slot_of_.assign(n_, -1);
    in_transition_.assign(n_, -1);
    std::vector<std::vector<vertex_t>> holder(P);  // holder[p][slot] = vertex or -1
    for (int p = 0; p < P; ++p) holder[p].assign(plan_.transition_rows[p], -1);
    std::vector<std::vector<vertex_t>> previous_transition(P);
    std::vector<std::vector<std::pair<vertex_t, vertex_t>>> previous_remote(P);
    std::vector<vertex_t> max_transition(P, 0), max_remote(P, 0);
    std::vector<edge_t> in_neighbors(n_, -1);
    std::vector<std::vector<vertex_t>> transition(P);
    std::vector<std::vector<vertex_t>> neighbors(P);
    Progress progress("verify", C);
    for (int c = 0; c < C; ++c) {
      progress.set(c);
      // N(p, c) and T_c^p from the dataset.
      for (int p = 0; p < P; ++p) {
        const ChunkPlan& chunk = plan_.chunk(c, p);
        const edge_t key = std::int64_t(c) * P + p;
        neighbors[p].clear();
        for (vertex_t v = chunk.dst_begin; v < chunk.dst_end; ++v)
          for_each_expected_entry(v, [&](vertex_t u) {
            if (in_neighbors[u] == key) return;
            in_neighbors[u] = key;
            neighbors[p].push_back(u);
          });
        baseline_rows_ += static_cast<std::int64_t>(neighbors[p].size());
      }
      for (int p = 0; p < P; ++p) transition[p].clear();
      for (int p = 0; p < P; ++p)
        for (vertex_t u : neighbors[p]) {
          if (in_transition_[u] == c) continue;
          in_transition_[u] = c;
          transition[owner_[u]].push_back(u);
        }
      for (int p = 0; p < P; ++p) {
        std::sort(transition[p].begin(), transition[p].end());
        transition_rows_ += static_cast<std::int64_t>(transition[p].size());
        max_transition[p] = std::max<vertex_t>(max_transition[p], transition[p].size());
      }
      // Leaves of batch c - 1, then the loads of batch c.
      for (int p = 0; p < P; ++p) {
        if (c > 0) check_leave(c - 1, p, previous_transition[p], transition[p], holder[p], c);
        check_loads(c, p, transition[p], holder[p]);
      }
      // Remote lists and the CSR, with every partition's slots of batch c in place.
      for (int p = 0; p < P; ++p) {
        check_remote(c, p, neighbors[p], previous_remote[p], max_remote[p]);
        check_csr(c, p, previous_remote[p]);
      }
      for (int p = 0; p < P; ++p) std::swap(previous_transition[p], transition[p]);
    }
    progress.finish();
    for (int p = 0; p < P; ++p) {
      check_leave(C - 1, p, previous_transition[p], {}, holder[p], -1);
      SLUICE_VERIFY(plan_.transition_rows[p] == max_transition[p], "transition_rows[", p, "] is ",
                    plan_.transition_rows[p], ", expected max_c |T_c^p| = ", max_transition[p]);
      SLUICE_VERIFY(plan_.remote_rows[p] == max_remote[p], "remote_rows[", p, "] is ",
                    plan_.remote_rows[p], ", expected ", max_remote[p]);
    }
  }

  // Leave list of (c, p) = T_c^p \ T_next^p, ascending, with the slots the rows hold.
  void check_leave(int c, int p, const std::vector<vertex_t>& current,
                   const std::vector<vertex_t>& next, std::vector<vertex_t>& holder,
                   int next_batch) {
    const ChunkPlan& chunk = plan_.chunk(c, p);
    std::vector<vertex_t> expected;
    std::set_difference(current.begin(), current.end(), next.begin(), next.end(),
                        std::back_inserter(expected));
    SLUICE_VERIFY(chunk.leave_vertices.size() == expected.size() &&
                      chunk.leave_slots.size() == expected.size(),
                  chunk_name(c, p), ": leave list has ", chunk.leave_vertices.size(),
                  " rows, expected ", expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const vertex_t v = chunk.leave_vertices[i];
      SLUICE_VERIFY(v == expected[i], chunk_name(c, p), ": leave list entry ", i, " is vertex ", v,
                    ", expected ", expected[i]);
      SLUICE_VERIFY(chunk.leave_slots[i] == slot_of_[v], chunk_name(c, p), ": leaving vertex ", v,
                    " listed in slot ", chunk.leave_slots[i], " but holds slot ", slot_of_[v]);
      holder[slot_of_[v]] = -1;
      slot_of_[v] = -1;
    }
    // Whatever did not leave must be needed in the next batch.
    vertex_t kept = 0;
    for (vertex_t v : current) {
      if (slot_of_[v] < 0) continue;
      SLUICE_VERIFY(next_batch >= 0 && in_transition_[v] == next_batch, chunk_name(c, p),
                    ": vertex ", v, " stays resident but is not in the next transition set");
      ++kept;
    }
    if (next_batch >= 0) {
      const ChunkPlan& following = plan_.chunk(next_batch, p);
      SLUICE_VERIFY(following.reuse_count == kept, chunk_name(next_batch, p), ": reuse_count is ",
                    following.reuse_count, ", expected |R| = ", kept);
      reused_rows_ += kept;
    }
  }

  void check_loads(int c, int p, const std::vector<vertex_t>& transition,
                   std::vector<vertex_t>& holder) {
    const ChunkPlan& chunk = plan_.chunk(c, p);
    SLUICE_VERIFY(chunk.load_slots.size() == chunk.load_vertices.size(), chunk_name(c, p),
                  ": load_slots and load_vertices differ in length");
    for (std::size_t i = 0; i < chunk.load_vertices.size(); ++i) {
      const vertex_t v = chunk.load_vertices[i];
      const vertex_t slot = chunk.load_slots[i];
      SLUICE_VERIFY(v >= 0 && v < n_ && owner_[v] == p, chunk_name(c, p), ": loads vertex ", v,
                    " not owned by the partition");
      SLUICE_VERIFY(i == 0 || chunk.load_vertices[i - 1] < v, chunk_name(c, p),
                    ": load list not strictly ascending at ", i);
      SLUICE_VERIFY(in_transition_[v] == c, chunk_name(c, p), ": loads vertex ", v,
                    " which is not in T_c^p");
      SLUICE_VERIFY(slot_of_[v] < 0, chunk_name(c, p), ": loads vertex ", v,
                    " which is already resident (it must be reused in place)");
      SLUICE_VERIFY(slot >= 0 && slot < plan_.transition_rows[p], chunk_name(c, p), ": load slot ",
                    slot, " outside the transition buffer");
      SLUICE_VERIFY(holder[slot] < 0, chunk_name(c, p), ": vertex ", v, " loaded into slot ", slot,
                    " which live vertex ", holder[slot], " holds");
      holder[slot] = v;
      slot_of_[v] = slot;
    }
    load_rows_ += static_cast<std::int64_t>(chunk.load_vertices.size());
    for (vertex_t v : transition)
      SLUICE_VERIFY(slot_of_[v] >= 0, chunk_name(c, p), ": vertex ", v,
                    " of T_c^p is neither reused nor loaded");
  }

  // `previous` holds (vertex, remote slot) of (c - 1, p) on entry and of (c, p) on exit.
  void check_remote(int c, int p, const std::vector<vertex_t>& neighbors,
                    std::vector<std::pair<vertex_t, vertex_t>>& previous, vertex_t& max_remote) {
    const ChunkPlan& chunk = plan_.chunk(c, p);
    std::vector<vertex_t> expected;
    for (vertex_t u : neighbors)
      if (owner_[u] != p) expected.push_back(u);
    std::sort(expected.begin(), expected.end());
    max_remote = std::max<vertex_t>(max_remote, expected.size());
    const std::size_t count = chunk.remote_vertices.size();
    SLUICE_VERIFY(count == expected.size(), chunk_name(c, p), ": ", count,
                  " remote vertices, expected ", expected.size());
    SLUICE_VERIFY(chunk.remote_owner.size() == count && chunk.remote_owner_slots.size() == count &&
                      chunk.remote_slots.size() == count && chunk.remote_pull.size() == count,
                  chunk_name(c, p), ": remote arrays differ in length");
    std::vector<std::pair<vertex_t, vertex_t>> current(count);
    std::vector<char> slot_used(plan_.remote_rows[p], 0);
    for (std::size_t i = 0; i < count; ++i) {
      const vertex_t u = chunk.remote_vertices[i];
      const vertex_t slot = chunk.remote_slots[i];
      SLUICE_VERIFY(u >= 0 && u < n_ && owner_[u] != p, chunk_name(c, p), ": remote entry ", i,
                    " is vertex ", u, ", not a remote vertex");
      SLUICE_VERIFY(chunk.remote_owner[i] == owner_[u], chunk_name(c, p), ": remote vertex ", u,
                    " listed with owner ", chunk.remote_owner[i], ", owner is ", owner_[u]);
      SLUICE_VERIFY(chunk.remote_owner_slots[i] == slot_of_[u], chunk_name(c, p),
                    ": remote vertex ", u, " points at slot ", chunk.remote_owner_slots[i],
                    " of partition ", owner_[u], ", which holds it in slot ", slot_of_[u]);
      SLUICE_VERIFY(slot >= 0 && slot < plan_.remote_rows[p] && !slot_used[slot], chunk_name(c, p),
                    ": remote slot ", slot, " of vertex ", u, " is out of range or used twice");
      slot_used[slot] = 1;
      current[i] = {u, slot};
    }
    std::sort(current.begin(), current.end());
    for (std::size_t i = 0; i < count; ++i)
      SLUICE_VERIFY(current[i].first == expected[i], chunk_name(c, p),
                    ": remote set differs from N(p,c) minus own vertices at vertex ", expected[i]);
    for (std::size_t i = 0; i < count; ++i) {
      const vertex_t u = chunk.remote_vertices[i];
      const auto it =
          std::lower_bound(previous.begin(), previous.end(), std::pair<vertex_t, vertex_t>(u, -1));
      const bool was_remote = it != previous.end() && it->first == u;
      if (was_remote) {
        SLUICE_VERIFY(chunk.remote_slots[i] == it->second && chunk.remote_pull[i] == 0,
                      chunk_name(c, p), ": remote vertex ", u,
                      " stays from the previous batch but moves or is pulled again");
      } else {
        SLUICE_VERIFY(chunk.remote_pull[i] == 1, chunk_name(c, p), ": remote vertex ", u,
                      " is new in this batch but not pulled");
        ++pull_rows_;
      }
    }
    previous.swap(current);
  }

  // Columns: the expected neighbors, mapped to the merged buffer of partition p.
  void check_csr(int c, int p, const std::vector<std::pair<vertex_t, vertex_t>>& remote) {
    const ChunkPlan& chunk = plan_.chunk(c, p);
    SLUICE_VERIFY(chunk.indptr.size() == std::size_t(chunk.dst_end - chunk.dst_begin) + 1 &&
                      chunk.indptr.front() == 0,
                  chunk_name(c, p), ": indptr has the wrong length or start");
    SLUICE_VERIFY(chunk.indptr.back() == edge_t(chunk.columns.size()), chunk_name(c, p),
                  ": indptr does not end at the column count");
    for (vertex_t v = chunk.dst_begin; v < chunk.dst_end; ++v) {
      const vertex_t row = v - chunk.dst_begin;
      edge_t position = chunk.indptr[row];
      const edge_t row_end = chunk.indptr[row + 1];
      SLUICE_VERIFY(position <= row_end, chunk_name(c, p), ": indptr decreases at row ", row);
      for_each_expected_entry(v, [&](vertex_t u) {
        SLUICE_VERIFY(position < row_end, chunk_name(c, p), ": row of vertex ", v,
                      " is missing edges");
        vertex_t expected;
        if (owner_[u] == p) {
          expected = slot_of_[u];
        } else {
          const auto it =
              std::lower_bound(remote.begin(), remote.end(), std::pair<vertex_t, vertex_t>(u, -1));
          expected = plan_.transition_rows[p] + it->second;
        }
        SLUICE_VERIFY(chunk.columns[position] == expected, chunk_name(c, p), ": row of vertex ", v,
                      ", entry ", position - chunk.indptr[row], " (neighbor ", u, ") has column ",
                      chunk.columns[position], ", expected ", expected);
        ++position;
      });
      SLUICE_VERIFY(position == row_end, chunk_name(c, p), ": row of vertex ", v,
                    " has extra entries");
    }
  }

  void check_stats() {
    const PlanStats& s = plan_.stats;
    SLUICE_VERIFY(s.volume_baseline_rows == baseline_rows_, "stats: volume_baseline_rows is ",
                  s.volume_baseline_rows, ", recomputed ", baseline_rows_);
    SLUICE_VERIFY(s.volume_p2p_rows == transition_rows_, "stats: volume_p2p_rows is ",
                  s.volume_p2p_rows, ", recomputed ", transition_rows_);
    SLUICE_VERIFY(s.volume_reuse_rows == load_rows_, "stats: volume_reuse_rows is ",
                  s.volume_reuse_rows, ", recomputed ", load_rows_);
    SLUICE_VERIFY(s.reused_rows == reused_rows_, "stats: reused_rows is ", s.reused_rows,
                  ", recomputed ", reused_rows_);
    SLUICE_VERIFY(s.p2p_rows == pull_rows_, "stats: p2p_rows is ", s.p2p_rows, ", recomputed ",
                  pull_rows_);
    const double replication = static_cast<double>(baseline_rows_) / n_;
    SLUICE_VERIFY(std::abs(s.replication_factor - replication) <= 1e-9 * replication,
                  "stats: replication_factor is ", s.replication_factor, ", recomputed ",
                  replication);
    const double row_bytes = 4.0 * std::max<std::int64_t>(1, s.cost_feature_dim);
    const Bandwidths& b = plan_.bandwidths;
    const double cost =
        row_bytes * (load_rows_ / b.h2d + pull_rows_ / b.p2p + reused_rows_ / b.reuse);
    SLUICE_VERIFY(std::abs(s.cost_after - cost) <= 1e-9 * std::max(cost, 1e-30),
                  "stats: cost_after is ", s.cost_after, ", recomputed ", cost);
    SLUICE_VERIFY(s.cost_after <= s.cost_before * (1 + 1e-12), "stats: cost_after ", s.cost_after,
                  " exceeds cost_before ", s.cost_before);
  }

  const Dataset& d_;
  const Plan& plan_;
  const vertex_t n_;
  std::vector<int> owner_;
  std::vector<vertex_t> slot_of_;            // transition slot of each resident vertex, -1 if none
  std::vector<std::int32_t> in_transition_;  // last batch whose T_c held the vertex
  std::int64_t baseline_rows_ = 0, transition_rows_ = 0, load_rows_ = 0, reused_rows_ = 0,
               pull_rows_ = 0;
};

}  // namespace

std::string find_plan_violation(const Dataset& dataset, const Plan& plan) {
  StageTimer timer("verify plan");
  if (dataset.num_nodes <= 0 || dataset.indptr.size() != std::size_t(dataset.num_nodes) + 1)
    return "dataset graph is malformed";
  try {
    Verifier(dataset, plan).run();
  } catch (const Violation& v) {
    return v.message;
  }
  return {};
}

void require_plan_matches(const Plan& plan, const std::string& dataset_fingerprint,
                          const std::string& plan_path, const std::string& dataset_path) {
  SLUICE_INPUT_CHECK(plan.dataset_fingerprint == dataset_fingerprint, plan_path,
                     ": plan was built from another dataset (plan fingerprint ",
                     plan.dataset_fingerprint, ", ", dataset_path, " has ", dataset_fingerprint,
                     ")");
}

}  // namespace sluice
