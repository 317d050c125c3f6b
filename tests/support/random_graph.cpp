// Implementation of tests/support/random_graph.hpp.
#include "tests/support/random_graph.hpp"

#include <set>
#include <vector>

#include "common/error.hpp"
#include "common/hash.hpp"

namespace sluice::test {

Dataset random_dataset(vertex_t n, int out_degree, std::int64_t dim, std::int32_t classes,
                       std::uint64_t seed, ReverseEdgesIntoSources reverse_into_sources) {
  Dataset d;
  d.name = cat("random", n);
  d.num_nodes = n;
  d.feature_dim = dim;
  d.num_classes = classes;
  const bool skip_reverse_into_sources = reverse_into_sources == ReverseEdgesIntoSources::kSkip;
  std::vector<std::set<vertex_t>> in(std::size_t(n), std::set<vertex_t>{});
  for (vertex_t v = 0; v < n; ++v) {
    if (v % 17 == 5) continue;  // no out-edges
    for (int k = 0; k < out_degree; ++k) {
      const auto u = vertex_t(key_hash(seed, 1, std::uint64_t(v), std::uint64_t(k)) % n);
      if (u % 23 == 7) continue;  // no in-edges
      in[std::size_t(u)].insert(v);
      if (k % 2 == 0 && !(skip_reverse_into_sources && v % 23 == 7))
        in[std::size_t(v)].insert(u);  // partly symmetric
    }
  }
  d.indptr.push_back(0);
  for (vertex_t v = 0; v < n; ++v) {
    for (vertex_t u : in[std::size_t(v)]) d.indices.push_back(u);  // may include self loops
    d.indptr.push_back(edge_t(d.indices.size()));
  }
  for (std::int64_t i = 0; i < std::int64_t(n) * dim; ++i)
    d.features.push_back(2.f * hash_to_unit(key_hash(seed, 2, std::uint64_t(i))) - 1.f);
  for (vertex_t v = 0; v < n; ++v) {
    const auto h = key_hash(seed, 3, std::uint64_t(v));
    d.labels.push_back(v % 13 == 3 ? -1 : std::int32_t(h % std::uint64_t(classes)));
    const int s = int((h >> 20) % 10);
    if (s < 4)
      d.train.push_back(v);
    else if (s < 7)
      d.valid.push_back(v);
    else
      d.test.push_back(v);
  }
  validate_dataset(d, d.name);
  return d;
}

Dataset with_dense_start(Dataset d, vertex_t hubs, vertex_t extra) {
  std::vector<std::set<vertex_t>> in(std::size_t(d.num_nodes));
  for (vertex_t v = 0; v < d.num_nodes; ++v)
    in[std::size_t(v)].insert(d.indices.begin() + d.indptr[v], d.indices.begin() + d.indptr[v + 1]);
  for (vertex_t v = 0; v < hubs && v < d.num_nodes; ++v)
    for (vertex_t k = 0; k < extra; ++k) in[std::size_t(v)].insert((v * 7 + k * 3) % d.num_nodes);
  d.indptr.assign(1, 0);
  d.indices.clear();
  for (const auto& sources : in) {
    d.indices.insert(d.indices.end(), sources.begin(), sources.end());
    d.indptr.push_back(edge_t(d.indices.size()));
  }
  d.name += "-dense-start";
  validate_dataset(d, d.name);
  return d;
}

Dataset symmetrized(Dataset d) {
  std::vector<std::set<vertex_t>> in(std::size_t(d.num_nodes));
  for (vertex_t v = 0; v < d.num_nodes; ++v)
    for (edge_t e = d.indptr[std::size_t(v)]; e < d.indptr[std::size_t(v) + 1]; ++e) {
      const vertex_t u = d.indices[std::size_t(e)];
      in[std::size_t(v)].insert(u);
      in[std::size_t(u)].insert(v);
    }
  d.indptr.assign(1, 0);
  d.indices.clear();
  for (const std::set<vertex_t>& row : in) {
    d.indices.insert(d.indices.end(), row.begin(), row.end());
    d.indptr.push_back(edge_t(d.indices.size()));
  }
  validate_dataset(d, d.name);
  return d;
}

}  // namespace sluice::test
