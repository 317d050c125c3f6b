// Implementation of train/schedule_lists.hpp. derive_lists() replays the plan batch by batch:
// the slot contents of every device's transition buffer (its leave lists empty slots, its load
// lists fill them) and remote region, against which every CSR column, remote entry and list is
// checked, so a plan of another dataset or a corrupted one fails at setup, not in training.
#include "train/schedule_lists.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "common/error.hpp"
#include "common/parallel.hpp"

namespace sluice::schedule_detail {

namespace {

// Rows by owner, in list order within each owner; `vertices` (the rows' vertices, for pulls) may
// be empty.
std::vector<PeerRows> group_by_owner(const std::vector<int>& owners,
                                     const std::vector<vertex_t>& owner_rows,
                                     const std::vector<vertex_t>& local_rows,
                                     const std::vector<vertex_t>& vertices, int partitions) {
  std::vector<PeerRows> groups(static_cast<std::size_t>(partitions));
  for (std::size_t i = 0; i < owners.size(); ++i) {
    auto& g = groups[std::size_t(owners[i])];
    g.owner = owners[i];
    g.owner_rows.push_back(owner_rows[i]);
    g.local_rows.push_back(local_rows[i]);
    if (!vertices.empty()) g.vertices.push_back(vertices[i]);
  }
  std::vector<PeerRows> out;
  for (auto& g : groups)
    if (!g.owner_rows.empty()) out.push_back(std::move(g));
  return out;
}

// Vertices with their merged positions, sorted by vertex (ascending host gathers).
void sorted_rows(std::vector<std::pair<vertex_t, vertex_t>>& pairs, const Plan& plan,
                 std::vector<vertex_t>& vertices, std::vector<vertex_t>& rows,
                 std::vector<vertex_t>& keys) {
  std::sort(pairs.begin(), pairs.end());
  vertices.clear();
  rows.clear();
  keys.clear();
  for (const auto& [v, r] : pairs) {
    vertices.push_back(v);
    rows.push_back(r);
    keys.push_back(plan.new_to_old[std::size_t(v)]);
  }
}

void check_plan_shape(const Dataset& d, const Plan& plan) {
  const int P = plan.partitions, C = plan.chunks;
  const vertex_t n = d.num_nodes;
  SLUICE_INPUT_CHECK(plan.num_nodes == n, "plan has ", plan.num_nodes,
                     " vertices but the dataset has ", n, " (plan built from another dataset?)");
  SLUICE_INPUT_CHECK(plan.num_dataset_edges == d.num_edges(), "plan was built for ",
                     plan.num_dataset_edges, " edges but the dataset has ", d.num_edges(),
                     " (plan built from another dataset?)");
  SLUICE_INPUT_CHECK(P >= 1 && C >= 1 && plan.chunk_plans.size() == std::size_t(P) * C &&
                         plan.transition_rows.size() == std::size_t(P) &&
                         plan.remote_rows.size() == std::size_t(P) &&
                         plan.new_to_old.size() == std::size_t(n) &&
                         plan.old_to_new.size() == std::size_t(n) &&
                         plan.partition_offsets.size() == std::size_t(P) + 1,
                     "plan arrays have inconsistent sizes");
}

// The first position of `slots` (each in [0, num_slots)) whose slot an earlier position holds.
std::int64_t first_repeated_slot(const std::vector<vertex_t>& slots, vertex_t num_slots) {
  std::vector<std::uint8_t> seen(std::size_t(num_slots), 0);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (seen[std::size_t(slots[i])]) return std::int64_t(i);
    seen[std::size_t(slots[i])] = 1;
  }
  SLUICE_FAIL("no slot is listed twice");
}

std::string where(int c, int p) {
  return cat("plan chunk (batch ", c, ", partition ", p, ")");
}

// The slot contents of every device during one batch, advanced batch by batch.
class PlanReplay {
 public:
  PlanReplay(const Dataset& d, const Plan& plan, const ModelSpec& model);

  // Batch c's checks, in order: the transition update, the remote entries, the chunks' CSRs
  // (which also fill the lists' column degrees, self columns and per-destination lists), and
  // that T_c^p holds exactly the rows the batch needs.
  void check_batch(int c, std::vector<ChunkLists>& lists);
  // Batch c's load, leave, pull and push lists of `mode` (baseline or p2p; reuse_lists() makes
  // those of p2p+reuse).
  void scheme_lists(int c, CommMode mode, std::vector<ChunkLists>& lists) const;
  // After the last batch every row has left, and every vertex was some chunk's destination.
  void check_end();

 private:
  int owner_of(vertex_t v) const;
  void update_transition(int c, int p);
  void update_remote(int c);
  void mark_remote_references(int c);
  void check_csr(int c, int p, ChunkLists& out);
  void check_needed(int c) const;

  const Dataset& d_;
  const Plan& plan_;
  const ModelSpec& model_;
  const int P_;
  const vertex_t n_;
  std::vector<std::int32_t> deg_plus_;              // in-degree + 1 by dataset id
  std::vector<std::uint8_t> split_bits_, covered_;  // split_bits_: as ChunkLists::split_bits
  // Per partition: transition slot and remote slot contents (-1: empty), and the transition
  // slots the running batch reads.
  std::vector<std::vector<vertex_t>> slot_vertex_, remote_vertex_;
  // The same slots' dataset ids (-1: empty) and, for GCN, degrees (in-degree + 1; 0: empty),
  // kept beside the contents so that a chunk's entries are checked against arrays the size of
  // the merged buffer, not looked up in the vertex-sized maps entry by entry. Merged-row order:
  // transition slots, then remote slots.
  std::vector<std::vector<vertex_t>> merged_old_;
  std::vector<std::vector<std::int32_t>> merged_degree_;
  void set_merged(int p, std::int64_t row, vertex_t v);
  std::vector<std::vector<std::uint8_t>> needed_;
};

PlanReplay::PlanReplay(const Dataset& d, const Plan& plan, const ModelSpec& model)
    : d_(d), plan_(plan), model_(model), P_(plan.partitions), n_(d.num_nodes) {
  deg_plus_.assign(std::size_t(n_), 1);
#pragma omp parallel for schedule(static) if (worth_parallel(std::int64_t(d.indices.size()) + n_))
  for (vertex_t o = 0; o < n_; ++o)
    for (edge_t e = d.indptr[o]; e < d.indptr[o + 1]; ++e)
      if (d.indices[std::size_t(e)] != o) ++deg_plus_[std::size_t(o)];
  split_bits_.assign(std::size_t(n_), 0);
  int bit = 0;
  for (const std::vector<vertex_t>* split : {&d.train, &d.valid, &d.test}) {
    for (vertex_t v : *split) split_bits_[std::size_t(v)] |= std::uint8_t(1u << bit);
    ++bit;
  }
  covered_.assign(std::size_t(n_), 0);
  slot_vertex_.resize(std::size_t(P_));
  remote_vertex_.resize(std::size_t(P_));
  merged_old_.resize(std::size_t(P_));
  merged_degree_.resize(std::size_t(P_));
  for (int p = 0; p < P_; ++p) {
    slot_vertex_[p].assign(std::size_t(plan.transition_rows[p]), -1);
    remote_vertex_[p].assign(std::size_t(plan.remote_rows[p]), -1);
    const std::size_t merged = std::size_t(plan.transition_rows[p]) + plan.remote_rows[p];
    merged_old_[p].assign(merged, -1);
    if (model.kind == ModelKind::kGcn) merged_degree_[p].assign(merged, 0);
  }
}

// Merged row `row` of partition p now holds renumbered vertex v (-1: nothing).
void PlanReplay::set_merged(int p, std::int64_t row, vertex_t v) {
  const vertex_t o = v >= 0 ? plan_.new_to_old[std::size_t(v)] : -1;
  merged_old_[p][std::size_t(row)] = o;
  if (!merged_degree_[p].empty())
    merged_degree_[p][std::size_t(row)] = o >= 0 ? deg_plus_[std::size_t(o)] : 0;
}

int PlanReplay::owner_of(vertex_t v) const {
  const auto it =
      std::upper_bound(plan_.partition_offsets.begin(), plan_.partition_offsets.end(), v);
  return int(it - plan_.partition_offsets.begin()) - 1;
}

void PlanReplay::check_batch(int c, std::vector<ChunkLists>& lists) {
  for (int p = 0; p < P_; ++p) update_transition(c, p);
  update_remote(c);
  mark_remote_references(c);
  for (int p = 0; p < P_; ++p) check_csr(c, p, lists[std::size_t(c) * P_ + p]);
  check_needed(c);
}

// Transition update: rows of batch c-1's leave lists go, L_c^p arrives. Each list is checked
// against the slot contents before it and then applied, both in parallel: an entry that meets a
// slot an earlier entry of the same list already changed (a slot listed twice) is found while
// applying, and reported as the loop in list order would have met it.
void PlanReplay::update_transition(int c, int p) {
  const ChunkPlan& ch = plan_.chunk(c, p);
  auto& slots = slot_vertex_[p];
  const vertex_t num_slots = vertex_t(slots.size());
  if (c > 0) {
    const ChunkPlan& prev = plan_.chunk(c - 1, p);
    const auto leave_error = [&](std::int64_t i) {
      return InputError(cat(where(c, p), ": leave entry ", i,
                            " of the previous batch does not match the slot contents"));
    };
    const std::int64_t leaves = std::int64_t(prev.leave_slots.size());
    SLUICE_INPUT_CHECK(prev.leave_vertices.size() == prev.leave_slots.size(), where(c, p),
                       ": leave lists of the previous batch differ in length");
    check_in_parallel(leaves, 4096, leaves, [&](std::int64_t i) {
      const vertex_t s = prev.leave_slots[std::size_t(i)];
      const vertex_t v = prev.leave_vertices[std::size_t(i)];
      if (s < 0 || s >= num_slots || v < 0 || slots[std::size_t(s)] != v) throw leave_error(i);
    });
    bool twice = false;
#pragma omp parallel for schedule(static) reduction(|| : twice) if (worth_parallel(leaves))
    for (std::int64_t i = 0; i < leaves; ++i) {
      const vertex_t s = prev.leave_slots[std::size_t(i)];
      if (__atomic_exchange_n(&slots[std::size_t(s)], vertex_t(-1), __ATOMIC_RELAXED) < 0)
        twice = true;
      else
        set_merged(p, s, -1);
    }
    if (twice) throw leave_error(first_repeated_slot(prev.leave_slots, num_slots));
  }
  std::int64_t kept = 0;
#pragma omp parallel for schedule(static) reduction(+ : kept) if (worth_parallel(num_slots))
  for (std::int64_t s = 0; s < num_slots; ++s) kept += slots[std::size_t(s)] >= 0;
  SLUICE_INPUT_CHECK(kept == ch.reuse_count, where(c, p), ": ", kept,
                     " rows stay in place but reuse_count is ", ch.reuse_count);
  SLUICE_INPUT_CHECK(ch.load_slots.size() == ch.load_vertices.size(), where(c, p),
                     ": load lists differ in length");
  const auto load_error = [&](std::int64_t i) {
    return InputError(cat(
        where(c, p), ": load entry ", i, " (vertex ", ch.load_vertices[std::size_t(i)], ", slot ",
        ch.load_slots[std::size_t(i)], ") is out of range, foreign or lands on an occupied slot"));
  };
  const std::int64_t loads = std::int64_t(ch.load_slots.size());
  check_in_parallel(loads, 4096, loads, [&](std::int64_t i) {
    const vertex_t s = ch.load_slots[std::size_t(i)], v = ch.load_vertices[std::size_t(i)];
    if (s < 0 || s >= num_slots || slots[std::size_t(s)] >= 0 || v < 0 || v >= n_ ||
        owner_of(v) != p)
      throw load_error(i);
  });
  bool twice = false;
#pragma omp parallel for schedule(static) reduction(|| : twice) if (worth_parallel(loads))
  for (std::int64_t i = 0; i < loads; ++i) {
    const vertex_t s = ch.load_slots[std::size_t(i)], v = ch.load_vertices[std::size_t(i)];
    if (__atomic_exchange_n(&slots[std::size_t(s)], v, __ATOMIC_RELAXED) >= 0)
      twice = true;
    else
      set_merged(p, s, v);
  }
  if (twice) throw load_error(first_repeated_slot(ch.load_slots, num_slots));
}

// Remote entries: owners must hold the vertex in the named slot during this batch.
void PlanReplay::update_remote(int c) {
  std::vector<std::vector<vertex_t>> new_remote(static_cast<std::size_t>(P_));
  for (int p = 0; p < P_; ++p) {
    const ChunkPlan& ch = plan_.chunk(c, p);
    new_remote[p].assign(std::size_t(plan_.remote_rows[p]), -1);
    const std::size_t r = ch.remote_vertices.size();
    SLUICE_INPUT_CHECK(ch.remote_owner.size() == r && ch.remote_owner_slots.size() == r &&
                           ch.remote_slots.size() == r && ch.remote_pull.size() == r,
                       where(c, p), ": remote lists differ in length");
    for (std::size_t i = 0; i < r; ++i) {
      const vertex_t v = ch.remote_vertices[i], s = ch.remote_slots[i];
      const int q = ch.remote_owner[i];
      SLUICE_INPUT_CHECK(q >= 0 && q < P_ && q != p && owner_of(v) == q, where(c, p),
                         ": remote entry ", i, " has a wrong owner");
      const vertex_t os = ch.remote_owner_slots[i];
      SLUICE_INPUT_CHECK(
          os >= 0 && os < plan_.transition_rows[q] && slot_vertex_[q][std::size_t(os)] == v,
          where(c, p), ": remote entry ", i, " (vertex ", v, ") is not in its owner's slot ", os);
      SLUICE_INPUT_CHECK(s >= 0 && s < plan_.remote_rows[p] && new_remote[p][std::size_t(s)] < 0,
                         where(c, p), ": remote slot ", s, " out of range or used twice");
      if (!ch.remote_pull[i])
        SLUICE_INPUT_CHECK(c > 0 && remote_vertex_[p][std::size_t(s)] == v, where(c, p),
                           ": remote entry ", i, " is marked as kept but the slot held ",
                           "another vertex in the previous batch");
      new_remote[p][std::size_t(s)] = v;
    }
  }
  remote_vertex_.swap(new_remote);
  for (int p = 0; p < P_; ++p) {
    const std::int64_t TR = plan_.transition_rows[p], remote_rows = plan_.remote_rows[p];
#pragma omp parallel for schedule(static) if (worth_parallel(remote_rows))
    for (std::int64_t r = 0; r < remote_rows; ++r)
      set_merged(p, TR + r, remote_vertex_[p][std::size_t(r)]);
  }
}

// Needed transition rows, first the peers' remote references (check_csr() adds the own local
// columns).
void PlanReplay::mark_remote_references(int c) {
  needed_.assign(std::size_t(P_), {});
  for (int p = 0; p < P_; ++p) needed_[p].assign(std::size_t(plan_.transition_rows[p]), 0);
  for (int p = 0; p < P_; ++p) {
    const ChunkPlan& ch = plan_.chunk(c, p);
    for (std::size_t i = 0; i < ch.remote_vertices.size(); ++i)
      needed_[std::size_t(ch.remote_owner[i])][std::size_t(ch.remote_owner_slots[i])] = 1;
  }
}

// Chunk (c, p)'s CSR: every entry must name the expected neighbor; records the GCN column
// degrees. Rows are checked in parallel, and the error of the first row at fault is the one
// thrown: the one a check row by row meets first, since a row's checks read nothing other rows of
// the chunk write (its destination is its own; distinct rows that passed the renumbering check have
// distinct dataset ids).
void PlanReplay::check_csr(int c, int p, ChunkLists& out) {
  const ChunkPlan& ch = plan_.chunk(c, p);
  const vertex_t TR = plan_.transition_rows[p];
  const vertex_t rows = ch.num_dst();
  SLUICE_INPUT_CHECK(rows >= 0 && ch.dst_begin >= plan_.partition_offsets[p] &&
                         ch.dst_end <= plan_.partition_offsets[p + 1] &&
                         ch.indptr.size() == std::size_t(rows) + 1 && ch.indptr[0] == 0 &&
                         ch.columns.size() == std::size_t(ch.indptr.back()),
                     where(c, p), ": destination range or CSR shape is inconsistent");
  std::uint8_t* needed = needed_[p].data();
  const vertex_t* merged_old = merged_old_[p].data();
  const std::int64_t merged_rows = std::int64_t(merged_old_[p].size());
  // The dataset id in merged row col (-1: empty or outside the buffer).
  auto old_at = [&](vertex_t col) -> vertex_t {
    if (col >= 0 && col < TR) {
#pragma omp atomic write
      needed[std::size_t(col)] = 1;
    }
    return col >= 0 && col < merged_rows ? merged_old[std::size_t(col)] : -1;
  };
  // GCN's column degrees: every occupied merged row's (the CSR reads some of them).
  if (model_.kind == ModelKind::kGcn) out.column_degrees = merged_degree_[p];
  out.self_columns.resize(std::size_t(rows));
  out.dst_keys.resize(std::size_t(rows));
  out.labels.resize(std::size_t(rows));
  out.split_bits.resize(std::size_t(rows));
  auto check_row = [&](vertex_t i) {
    const vertex_t v = ch.dst_begin + i;
    const vertex_t o = plan_.new_to_old[std::size_t(v)];
    SLUICE_INPUT_CHECK(
        o >= 0 && o < n_ && plan_.old_to_new[std::size_t(o)] == v && !covered_[std::size_t(o)],
        where(c, p), ": destination ", v, " is not a valid renumbered vertex");
    covered_[std::size_t(o)] = 1;
    const edge_t begin = ch.indptr[std::size_t(i)], end = ch.indptr[std::size_t(i) + 1];
    const edge_t len = end - begin;
    SLUICE_INPUT_CHECK(len == deg_plus_[std::size_t(o)], where(c, p), ": row of vertex ", v,
                       " has ", len,
                       " entries, expected in-degree + 1 = ", deg_plus_[std::size_t(o)]);
    edge_t k = begin;
    auto check_entry = [&](vertex_t expected_old) {
      const vertex_t col = ch.columns[std::size_t(k)];
      SLUICE_INPUT_CHECK(old_at(col) == expected_old, where(c, p), ": entry ", k - begin,
                         " of the row of vertex ", v, " (column ", col,
                         ") does not hold dataset vertex ", expected_old);
      ++k;
    };
    out.self_columns[std::size_t(i)] = ch.columns[std::size_t(begin)];
    check_entry(o);
    for (edge_t e = d_.indptr[o]; e < d_.indptr[o + 1]; ++e) {
      const vertex_t u = d_.indices[std::size_t(e)];
      if (u != o) check_entry(u);
    }
    out.dst_keys[std::size_t(i)] = o;
    out.labels[std::size_t(i)] = d_.labels.empty() ? -1 : d_.labels[std::size_t(o)];
    out.split_bits[std::size_t(i)] = split_bits_[std::size_t(o)];
  };
  check_in_parallel(rows, 256, rows, [&](std::int64_t i) { check_row(vertex_t(i)); });
}

// T_c^p must be exactly the needed rows (nothing missing, nothing stale).
void PlanReplay::check_needed(int c) const {
  for (int p = 0; p < P_; ++p) {
    const std::int64_t num_slots = std::int64_t(needed_[p].size());
    std::int64_t s = num_slots;  // the first slot at fault
#pragma omp parallel for schedule(static) reduction(min : s) if (worth_parallel(num_slots))
    for (std::int64_t i = 0; i < num_slots; ++i)
      if ((slot_vertex_[p][std::size_t(i)] >= 0) != bool(needed_[p][std::size_t(i)]))
        s = std::min(s, i);
    SLUICE_INPUT_CHECK(
        s == num_slots, "plan chunk (batch ", c, ", partition ", p, "): transition slot ", s,
        slot_vertex_[p][std::size_t(s)] >= 0 ? " holds a vertex no chunk of the batch needs"
                                             : " is needed but holds no vertex");
  }
}

void PlanReplay::scheme_lists(int c, CommMode mode, std::vector<ChunkLists>& lists) const {
  for (int p = 0; p < P_; ++p) {
    const ChunkPlan& ch = plan_.chunk(c, p);
    ChunkLists& out = lists[std::size_t(c) * P_ + p];
    const vertex_t TR = plan_.transition_rows[p];
    std::vector<int> owners(ch.remote_owner.begin(), ch.remote_owner.end());
    std::vector<vertex_t> local(ch.remote_slots.size());
    for (std::size_t i = 0; i < local.size(); ++i) local[i] = TR + ch.remote_slots[i];
    if (mode == CommMode::kBaseline) {
      // Every distinct column of the chunk from host memory; the same rows leave.
      std::vector<std::uint8_t> seen(std::size_t(TR) + plan_.remote_rows[p], 0);
      std::vector<std::pair<vertex_t, vertex_t>> refs;
      for (vertex_t col : ch.columns)
        if (!seen[std::size_t(col)]) {
          seen[std::size_t(col)] = 1;
          refs.emplace_back(col < TR ? slot_vertex_[p][std::size_t(col)]
                                     : remote_vertex_[p][std::size_t(col - TR)],
                            col);
        }
      sorted_rows(refs, plan_, out.load_vertices, out.load_rows, out.load_keys);
      out.leave_vertices = out.load_vertices;
      out.leave_rows = out.load_rows;
      out.leave_keys = out.load_keys;
      continue;
    }
    out.remote_rows = local;
    out.pushes = group_by_owner(owners, ch.remote_owner_slots, local, {}, P_);
    if (mode == CommMode::kP2p) {
      // Every occupied transition slot from host memory; every row leaves; every remote row
      // pulled.
      std::vector<std::pair<vertex_t, vertex_t>> all;
      for (std::size_t s = 0; s < slot_vertex_[p].size(); ++s)
        if (slot_vertex_[p][s] >= 0) all.emplace_back(slot_vertex_[p][s], vertex_t(s));
      sorted_rows(all, plan_, out.load_vertices, out.load_rows, out.load_keys);
      out.leave_vertices = out.load_vertices;
      out.leave_rows = out.load_rows;
      out.leave_keys = out.load_keys;
      out.pulls = group_by_owner(owners, ch.remote_owner_slots, local, ch.remote_vertices, P_);
      continue;
    }
    SLUICE_FAIL("p2p+reuse lists come from reuse_lists()");
  }
}

// Chunk (c, p)'s lists under p2p+reuse: the plan's own load and leave lists, and pulls of the
// remote rows not kept. They read nothing of the replay's slot contents.
void reuse_lists(const Plan& plan, int c, int p, ChunkLists& out) {
  const ChunkPlan& ch = plan.chunk(c, p);
  const vertex_t TR = plan.transition_rows[p];
  const std::size_t remotes = ch.remote_slots.size();
  std::vector<vertex_t> local(remotes);
  for (std::size_t i = 0; i < remotes; ++i) local[i] = TR + ch.remote_slots[i];
  const std::vector<int> owners(ch.remote_owner.begin(), ch.remote_owner.end());
  out.pushes = group_by_owner(owners, ch.remote_owner_slots, local, {}, plan.partitions);
  const auto keys = [&](const std::vector<vertex_t>& vertices) {
    std::vector<vertex_t> out_keys(vertices.size());
    for (std::size_t i = 0; i < vertices.size(); ++i)
      out_keys[i] = plan.new_to_old[std::size_t(vertices[i])];
    return out_keys;
  };
  out.load_vertices = ch.load_vertices;
  out.load_rows = ch.load_slots;
  out.load_keys = keys(ch.load_vertices);
  out.leave_vertices = ch.leave_vertices;
  out.leave_rows = ch.leave_slots;
  out.leave_keys = keys(ch.leave_vertices);
  std::vector<int> pull_owners;
  std::vector<vertex_t> pull_owner_rows, pull_local, pull_vertices;
  for (std::size_t i = 0; i < remotes; ++i)
    if (ch.remote_pull[i]) {
      pull_owners.push_back(owners[i]);
      pull_owner_rows.push_back(ch.remote_owner_slots[i]);
      pull_local.push_back(local[i]);
      pull_vertices.push_back(ch.remote_vertices[i]);
    }
  out.pulls =
      group_by_owner(pull_owners, pull_owner_rows, pull_local, pull_vertices, plan.partitions);
  out.remote_rows = std::move(local);
}

void PlanReplay::check_end() {
  const int C = plan_.chunks;
  for (int p = 0; p < P_; ++p) {
    const ChunkPlan& last = plan_.chunk(C - 1, p);
    for (std::size_t i = 0; i < last.leave_slots.size(); ++i) {
      const vertex_t s = last.leave_slots[i];
      SLUICE_INPUT_CHECK(s >= 0 && s < plan_.transition_rows[p] &&
                             slot_vertex_[p][std::size_t(s)] == last.leave_vertices[i],
                         "plan chunk (batch ", C - 1, ", partition ", p,
                         "): leave list does not match the slot contents");
      slot_vertex_[p][std::size_t(s)] = -1;
    }
    for (vertex_t v : slot_vertex_[p])
      SLUICE_INPUT_CHECK(v < 0, "plan partition ", p, ": vertex ", v,
                         " never leaves the transition buffer (leave lists incomplete)");
  }
  for (vertex_t o = 0; o < n_; ++o)
    SLUICE_INPUT_CHECK(covered_[std::size_t(o)], "plan: dataset vertex ", o,
                       " is the destination of no chunk");
}

}  // namespace

std::vector<ChunkLists> derive_lists(const Dataset& d, const Plan& plan, const ModelSpec& model,
                                     CommMode mode) {
  check_plan_shape(d, plan);
  PlanReplay replay(d, plan, model);
  std::vector<ChunkLists> lists(std::size_t(plan.partitions) * plan.chunks);
  for (int c = 0; c < plan.chunks; ++c) {
    replay.check_batch(c, lists);
    if (mode != CommMode::kP2pReuse) replay.scheme_lists(c, mode, lists);
  }
  replay.check_end();
  if (mode == CommMode::kP2pReuse) {
    const std::int64_t chunks = std::int64_t(lists.size());
    std::int64_t entries = 0;
    for (const ChunkPlan& ch : plan.chunk_plans)
      entries += std::int64_t(ch.load_vertices.size() + ch.leave_vertices.size());
#pragma omp parallel for schedule(dynamic, 1) if (chunks > 1 && worth_parallel(entries))
    for (std::int64_t k = 0; k < chunks; ++k)
      reuse_lists(plan, int(k / plan.partitions), int(k % plan.partitions), lists[std::size_t(k)]);
  }
  return lists;
}

// Every vertex leaves at least once per layer (its own chunk's self entry brings it into a
// transition buffer). A row's first flush is in the first list (in flush order) that holds it,
// at its first position there: the first list of every vertex is found in parallel (the least
// list index), then every list is split on its own thread.
void split_first_flushes(std::vector<ChunkLists>& lists, vertex_t num_nodes) {
  constexpr std::int32_t kNever = std::numeric_limits<std::int32_t>::max();
  std::vector<std::int32_t> first_list(std::size_t(num_nodes), kNever);
  const std::int64_t count = std::int64_t(lists.size());
#pragma omp parallel for schedule(dynamic, 1) if (worth_parallel(std::int64_t(num_nodes)))
  for (std::int64_t j = 0; j < count; ++j)
    for (vertex_t v : lists[std::size_t(j)].leave_vertices) {
      std::int32_t* slot = &first_list[std::size_t(v)];
      std::int32_t seen = __atomic_load_n(slot, __ATOMIC_RELAXED);
      while (std::int32_t(j) < seen &&
             !__atomic_compare_exchange_n(slot, &seen, std::int32_t(j), false, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED)) {
      }
    }
  // claimed[v]: v's first position in its first list is taken (only that list's thread writes).
  std::vector<std::uint8_t> claimed(std::size_t(num_nodes), 0);
#pragma omp parallel for schedule(dynamic, 1) if (worth_parallel(std::int64_t(num_nodes)))
  for (std::int64_t j = 0; j < count; ++j) {
    ChunkLists& li = lists[std::size_t(j)];
    std::vector<std::size_t> first, again;
    for (std::size_t i = 0; i < li.leave_vertices.size(); ++i) {
      const vertex_t v = li.leave_vertices[i];
      const bool is_first =
          first_list[std::size_t(v)] == std::int32_t(j) && !claimed[std::size_t(v)];
      if (is_first) claimed[std::size_t(v)] = 1;
      (is_first ? first : again).push_back(i);
    }
    if (again.empty()) {
      li.leave_store_count = li.leave_vertices.size();
      continue;
    }
    first.insert(first.end(), again.begin(), again.end());
    auto reorder = [&](std::vector<vertex_t>& values) {
      std::vector<vertex_t> out;
      out.reserve(values.size());
      for (std::size_t i : first) out.push_back(values[i]);
      values.swap(out);
    };
    li.leave_store_count = first.size() - again.size();
    reorder(li.leave_vertices);
    reorder(li.leave_rows);
    reorder(li.leave_keys);
  }
  vertex_t never = num_nodes;
#pragma omp parallel for schedule(static) \
    reduction(min                         \
              : never) if (worth_parallel(std::int64_t(num_nodes)))
  for (vertex_t v = 0; v < num_nodes; ++v)
    if (first_list[std::size_t(v)] == kNever) never = std::min(never, v);
  SLUICE_EXPECTS(never == num_nodes, "vertex ", never, " never leaves a transition buffer");
}

std::vector<TailLists> tail_lists(const ChunkLists& last, const Plan& plan, int p,
                                  TailPlace place) {
  const int C = plan.chunks;
  std::vector<int> order;  // chunks of p with destinations, by first destination
  for (int c = 0; c < C; ++c)
    if (plan.chunk(c, p).num_dst() > 0) order.push_back(c);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return plan.chunk(a, p).dst_begin < plan.chunk(b, p).dst_begin; });
  std::vector<TailLists> out(static_cast<std::size_t>(C));
  for (std::size_t i = 0; i < last.leave_vertices.size(); ++i) {
    const vertex_t v = last.leave_vertices[i];
    const auto it = std::upper_bound(order.begin(), order.end(), v, [&](vertex_t x, int c) {
      return x < plan.chunk(c, p).dst_begin;
    });
    SLUICE_EXPECTS(it != order.begin(), "tail row ", v, " precedes partition ", p, "'s chunks");
    const int c = *(it - 1);
    const ChunkPlan& cp = plan.chunk(c, p);
    SLUICE_EXPECTS(v < cp.dst_begin + cp.num_dst(), "tail row ", v, " is in no chunk of partition ",
                   p);
    TailLists& t = out[std::size_t(c)];
    const vertex_t position = v - cp.dst_begin;
    t.src.push_back(place == TailPlace::kFlushBuffer ? vertex_t(i) : last.leave_rows[i]);
    t.dst.push_back(position);
    if (i < last.leave_store_count) ++t.assign;  // first-time rows come first in the list
  }
  return out;
}

namespace {

// Where a SendRange finds each list's rows: the whole list, or those in the range's rows, by
// bisection (the list ascends).
enum class ListRows { kWhole, kInRange };

// Rows [row_begin, row_end), each list's positions among them and whether they are consecutive
// rows.
SendRange send_range(const ChunkLists& li, std::int64_t row_begin, std::int64_t row_end,
                     ListRows list_rows) {
  SendRange out;
  out.row_begin = row_begin;
  out.row_end = row_end;
  for (const ReceivedRows& r : li.received) {
    std::int64_t first = r.first, end = r.first + r.count;
    if (list_rows == ListRows::kInRange) {
      const auto begin = li.received_rows.begin() + r.first;
      first =
          std::lower_bound(begin, begin + r.count, vertex_t(row_begin)) - li.received_rows.begin();
      end = std::lower_bound(begin, begin + r.count, vertex_t(row_end)) - li.received_rows.begin();
    }
    bool consecutive = true;
    for (std::int64_t k = first + 1; consecutive && k < end; ++k)
      consecutive = li.received_rows[std::size_t(k)] == li.received_rows[std::size_t(k) - 1] + 1;
    out.received_begin.push_back(first);
    out.received_end.push_back(end);
    out.sent_first.push_back(first < end && consecutive ? li.received_rows[std::size_t(first)]
                                                        : -1);
  }
  return out;
}

}  // namespace

SendRange whole_send_range(const ChunkLists& li, std::int64_t rows) {
  return send_range(li, 0, rows, ListRows::kWhole);
}

std::vector<SendRange> send_ranges(const ChunkLists& li, std::int64_t rows) {
  const auto begin = [&](const ReceivedRows& r) { return li.received_rows.begin() + r.first; };
  const auto range = [&](std::int64_t row_begin, std::int64_t row_end) {
    return send_range(li, row_begin, row_end, ListRows::kInRange);
  };
  const bool ascending = std::all_of(
      li.received.begin(), li.received.end(),
      [&](const ReceivedRows& r) { return std::is_sorted(begin(r), begin(r) + r.count); });
  if (li.received_rows.empty() || !ascending) return {whole_send_range(li, rows)};
  // Every sent row in [low, high]: where the rows above `high` (a partition numbered with its
  // boundary vertices first, BoundaryVertices::kFirst), or else those below `low`, are at least
  // as many as the sent rows, the sent rows' range goes first and their copies run beside the
  // other range's transform.
  const auto [lowest, highest] =
      std::minmax_element(li.received_rows.begin(), li.received_rows.end());
  const std::int64_t low = *lowest, high = *highest + 1, sent_count = li.received_rows.size();
  if (rows - high >= sent_count && high > 0) return {range(0, high), range(high, rows)};
  if (low >= sent_count && low < rows) return {range(low, rows), range(0, low)};
  std::vector<vertex_t> sent = li.received_rows;
  const auto at = sent.begin() + std::ptrdiff_t(2 * sent.size() / 3);
  std::nth_element(sent.begin(), at, sent.end());
  const std::int64_t split = *at;
  if (split <= 0 || split >= rows) return {range(0, rows)};
  return {range(0, split), range(split, rows)};
}

void receive_pushes(std::vector<ChunkLists>& lists, int partitions) {
  const std::size_t P = std::size_t(partitions);
  for (std::size_t batch = 0; batch + P <= lists.size(); batch += P)
    for (std::size_t o = 0; o < P; ++o) {
      ChunkLists& owner = lists[batch + o];
      owner.received.clear();
      owner.received_rows.clear();
      for (std::size_t q = 0; q < P; ++q)
        for (PeerRows& push : lists[batch + q].pushes) {
          if (std::size_t(push.owner) != o) continue;
          push.receive_first = std::int64_t(owner.received_rows.size());
          owner.received.push_back(
              {int(q), push.receive_first, std::int64_t(push.owner_rows.size())});
          owner.received_rows.insert(owner.received_rows.end(), push.owner_rows.begin(),
                                     push.owner_rows.end());
        }
    }
}

}  // namespace sluice::schedule_detail
