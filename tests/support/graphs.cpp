// Implementation of tests/support/graphs.hpp.
#include "tests/support/graphs.hpp"

#include <algorithm>
#include <set>

#include "common/hash.hpp"

namespace sluice::test {

Dataset graph_from_in_neighbors(const std::vector<std::vector<vertex_t>>& in_neighbors) {
  Dataset d;
  d.name = "hand";
  d.num_nodes = static_cast<vertex_t>(in_neighbors.size());
  d.indptr.assign(in_neighbors.size() + 1, 0);
  for (std::size_t v = 0; v < in_neighbors.size(); ++v) {
    d.indptr[v + 1] = d.indptr[v] + static_cast<edge_t>(in_neighbors[v].size());
    d.indices.insert(d.indices.end(), in_neighbors[v].begin(), in_neighbors[v].end());
  }
  return d;
}

Dataset graph_from_edges(vertex_t n, const std::vector<Edge>& edges) {
  std::vector<std::vector<vertex_t>> in(static_cast<std::size_t>(n));
  for (const Edge& e : edges) in.at(static_cast<std::size_t>(e.destination)).push_back(e.source);
  Dataset d = graph_from_in_neighbors(in);
  d.name = "edges";
  return d;
}

Dataset path_graph(vertex_t n) {
  std::vector<Edge> edges;
  for (vertex_t v = 0; v < n; ++v) {
    if (v > 0) edges.push_back({v - 1, v});
    if (v + 1 < n) edges.push_back({v + 1, v});
  }
  Dataset d = graph_from_edges(n, edges);
  d.name = "path";
  return d;
}

Dataset star_graph(vertex_t leaves) {
  std::vector<Edge> edges;
  for (vertex_t leaf = 1; leaf <= leaves; ++leaf) {
    edges.push_back({leaf, 0});
    edges.push_back({0, leaf});
  }
  Dataset d = graph_from_edges(leaves + 1, edges);
  d.name = "star";
  return d;
}

Dataset drawn_graph() {
  Dataset d = graph_from_in_neighbors({{1, 2}, {0, 1, 3}, {}, {4, 5, 0}, {3}, {2, 4}});
  d.name = "drawn";
  return d;
}

Dataset random_symmetric_graph(vertex_t n, int draws_per_vertex, std::uint64_t seed) {
  std::vector<std::set<vertex_t>> in(static_cast<std::size_t>(n));
  for (vertex_t v = 0; v < n; ++v)
    for (int k = 0; k < draws_per_vertex; ++k) {
      const auto u = vertex_t(key_hash(seed, 1, std::uint64_t(v), std::uint64_t(k)) % n);
      if (u == v) continue;
      in[std::size_t(u)].insert(v);
      in[std::size_t(v)].insert(u);
    }
  std::vector<std::vector<vertex_t>> lists(in.size());
  for (std::size_t v = 0; v < in.size(); ++v) lists[v].assign(in[v].begin(), in[v].end());
  Dataset d = graph_from_in_neighbors(lists);
  d.name = "symmetric";
  return d;
}

Dataset skewed_multigraph(vertex_t n, edge_t m, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<vertex_t>> in(static_cast<std::size_t>(n));
  for (edge_t e = 0; e < m; ++e) {
    const vertex_t u = static_cast<vertex_t>(
        std::min<std::uint64_t>(n - 1, (rng() % n) * (rng() % n) / std::max<vertex_t>(1, n - 1) +
                                           (rng() % 3 == 0 ? rng() % n : 0)) %
        n);
    const vertex_t v = static_cast<vertex_t>(rng() % n);
    in[std::size_t(v)].push_back(u);
  }
  Dataset d = graph_from_in_neighbors(in);
  d.name = "random";
  return d;
}

Dataset local_multigraph(vertex_t n, edge_t m, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<vertex_t>> in(static_cast<std::size_t>(n));
  for (edge_t e = 0; e < m; ++e) {
    const vertex_t v = static_cast<vertex_t>(rng() % n);
    const vertex_t u = rng() % 4 == 0 ? static_cast<vertex_t>(rng() % n)
                                      : static_cast<vertex_t>((v + rng() % 9) % n);
    in[std::size_t(v)].push_back(u);
  }
  Dataset d = graph_from_in_neighbors(in);
  d.name = "small";
  return d;
}

Dataset hub_graph(vertex_t n, std::uint32_t seed) {
  Dataset d;
  d.name = "hubs";
  d.num_nodes = n;
  d.indptr.assign(std::size_t(n) + 1, 0);
  std::mt19937 rng(seed);
  for (vertex_t v = 0; v < n; ++v) {
    const int degree = 200 / (v + 1) + 1;
    for (int k = 0; k < degree; ++k) d.indices.push_back(vertex_t(rng() % n));
    d.indptr[std::size_t(v) + 1] = edge_t(d.indices.size());
  }
  return d;
}

void add_hashed_features(Dataset& dataset, std::int64_t feature_dim, std::uint64_t seed, float lo,
                         float hi) {
  dataset.feature_dim = feature_dim;
  dataset.features.clear();
  for (std::int64_t i = 0; i < std::int64_t(dataset.num_nodes) * feature_dim; ++i)
    dataset.features.push_back(lo + (hi - lo) * hash_to_unit(key_hash(seed, 2, std::uint64_t(i))));
}

void add_hashed_labels(Dataset& dataset, std::int32_t classes, std::uint64_t seed) {
  dataset.num_classes = classes;
  dataset.labels.clear();
  for (vertex_t v = 0; v < dataset.num_nodes; ++v)
    dataset.labels.push_back(std::int32_t(key_hash(seed, 3, std::uint64_t(v)) % classes));
}

Dataset two_clusters_dataset() {
  Dataset d;
  d.name = "two-clusters";
  d.num_nodes = 24;
  d.feature_dim = 4;
  d.num_classes = 2;
  std::mt19937 gen(3);
  std::normal_distribution<float> noise(0.f, 0.3f);
  d.indptr.push_back(0);
  for (vertex_t v = 0; v < 24; ++v) {
    const vertex_t base = v < 12 ? 0 : 12, i = v - base;
    for (vertex_t j : {(i + 1) % 12, (i + 11) % 12, (i + 5) % 12}) d.indices.push_back(base + j);
    d.indptr.push_back(edge_t(d.indices.size()));
    const int label = v < 12 ? 0 : 1;
    d.labels.push_back(label);
    for (int j = 0; j < 4; ++j) d.features.push_back((j == label ? 1.f : 0.f) + noise(gen));
    (i % 3 == 0 ? d.test : d.train).push_back(v);
  }
  d.valid = {1, 13};
  return d;
}

ChunkCsr random_chunk_csr(std::int64_t rows, std::int64_t cols, int max_degree,
                          EmptyRows empty_rows, std::mt19937& rng) {
  ChunkCsr a{{0}, {}, rows, cols};
  std::uniform_int_distribution<int> degree(0, max_degree);
  std::uniform_int_distribution<vertex_t> column(0, static_cast<vertex_t>(cols - 1));
  for (std::int64_t r = 0; r < rows; ++r) {
    std::vector<vertex_t> row;
    if (!(empty_rows == EmptyRows::kSome && r % 17 == 5)) {
      row.push_back(static_cast<vertex_t>(r % cols));
      const int d = degree(rng);
      for (int k = 0; k < d; ++k) {
        const vertex_t c = column(rng);
        if (std::find(row.begin(), row.end(), c) == row.end()) row.push_back(c);
      }
    }
    a.columns.insert(a.columns.end(), row.begin(), row.end());
    a.indptr.push_back(static_cast<edge_t>(a.columns.size()));
  }
  return a;
}

std::vector<vertex_t> id_sequence(std::int64_t count, vertex_t first, vertex_t step) {
  std::vector<vertex_t> ids(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = first + vertex_t(i) * step;
  return ids;
}

}  // namespace sluice::test
