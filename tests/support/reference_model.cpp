// Double-precision full-graph reference of docs/model-math.md (see reference_model.hpp).
// Deliberately naive: dense matrices as vectors, loops over vertices and N+(v) lists.
#include "tests/support/reference_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "common/error.hpp"
#include "common/hash.hpp"

namespace sluice::test {
namespace {

using Vec = std::vector<double>;

struct Dense {
  std::int64_t rows = 0, cols = 0;
  Vec v;
  Dense() = default;
  Dense(std::int64_t r, std::int64_t c) : rows(r), cols(c), v(std::size_t(r * c), 0.0) {}
  double& at(std::int64_t i, std::int64_t j) { return v[std::size_t(i * cols + j)]; }
  double at(std::int64_t i, std::int64_t j) const { return v[std::size_t(i * cols + j)]; }
  double* row(std::int64_t i) { return v.data() + i * cols; }
  const double* row(std::int64_t i) const { return v.data() + i * cols; }
};

// c = a (n x k) * w (k x m, flat row-major).
Dense multiply(const Dense& a, const Vec& w, std::int64_t m) {
  Dense c(a.rows, m);
  for (std::int64_t i = 0; i < a.rows; ++i)
    for (std::int64_t q = 0; q < a.cols; ++q) {
      const double x = a.at(i, q);
      if (x == 0.0) continue;
      for (std::int64_t j = 0; j < m; ++j) c.at(i, j) += x * w[std::size_t(q * m + j)];
    }
  return c;
}
// g (k x m, flat) += a^T (k x n) * d (n x m).
void add_transposed_product(const Dense& a, const Dense& d, Vec& g) {
  for (std::int64_t i = 0; i < a.rows; ++i)
    for (std::int64_t q = 0; q < a.cols; ++q) {
      const double x = a.at(i, q);
      if (x == 0.0) continue;
      for (std::int64_t j = 0; j < d.cols; ++j) g[std::size_t(q * d.cols + j)] += x * d.at(i, j);
    }
}
// d (n x m) * w^T, w flat k x m: result n x k.
Dense multiply_transposed(const Dense& d, const Vec& w, std::int64_t k) {
  Dense c(d.rows, k);
  for (std::int64_t i = 0; i < d.rows; ++i)
    for (std::int64_t q = 0; q < k; ++q) {
      double s = 0;
      for (std::int64_t j = 0; j < d.cols; ++j) s += d.at(i, j) * w[std::size_t(q * d.cols + j)];
      c.at(i, q) = s;
    }
  return c;
}
void add_column_sums(const Dense& d, Vec& g) {
  for (std::int64_t i = 0; i < d.rows; ++i)
    for (std::int64_t j = 0; j < d.cols; ++j) g[std::size_t(j)] += d.at(i, j);
}

enum class Kind { kGcn, kSage, kGat };

// N+(v) lists: v first, then its dataset in-neighbors without self loops, in dataset order.
struct Graph {
  std::int64_t n = 0;
  std::vector<edge_t> ptr;
  std::vector<vertex_t> src;
  Vec deg_plus;
};

Graph build_graph(const Dataset& d) {
  Graph g;
  g.n = d.num_nodes;
  g.ptr.push_back(0);
  for (vertex_t v = 0; v < d.num_nodes; ++v) {
    g.src.push_back(v);
    for (edge_t e = d.indptr[v]; e < d.indptr[v + 1]; ++e)
      if (d.indices[e] != v) g.src.push_back(d.indices[e]);
    g.ptr.push_back(edge_t(g.src.size()));
    g.deg_plus.push_back(double(g.ptr[v + 1] - g.ptr[v]));
  }
  return g;
}

struct LayerSpec {
  std::int64_t in = 0, out = 0;       // input width, output width
  std::int64_t heads = 1, width = 0;  // GAT: K, F
  bool last = false;
  std::size_t w = 0, b = 0, att_src = 0, att_dst = 0;  // parameter tensor indices
};

struct Spec {
  Kind kind = Kind::kGcn;
  std::vector<LayerSpec> layers;
  std::int64_t classes = 0;
  double dropout = 0, attention_dropout = 0;
  std::uint64_t seed = 0;
};

Spec make_spec(const Dataset& d, const ReferenceConfig& c) {
  Spec s;
  if (c.model == "gcn")
    s.kind = Kind::kGcn;
  else if (c.model == "sage")
    s.kind = Kind::kSage;
  else if (c.model == "gat")
    s.kind = Kind::kGat;
  else
    SLUICE_FAIL("reference: unknown model '", c.model, "'");
  SLUICE_EXPECTS(c.layers >= 1 && c.hidden >= 1 && c.heads >= 1 && c.output_heads >= 1,
                 "reference: bad model shape");
  SLUICE_EXPECTS(c.dropout >= 0 && c.dropout < 1, "reference: dropout ", c.dropout);
  s.classes = d.num_classes;
  s.dropout = c.dropout;
  s.attention_dropout = c.attention_dropout < 0 ? c.dropout : c.attention_dropout;
  s.seed = c.seed;
  std::int64_t in = d.feature_dim;
  std::size_t tensor = 0;
  for (int l = 0; l < c.layers; ++l) {
    LayerSpec ls;
    ls.last = l == c.layers - 1;
    ls.in = in;
    if (s.kind == Kind::kGat) {
      ls.heads = ls.last ? c.output_heads : c.heads;
      ls.width = ls.last ? d.num_classes : c.hidden;
      ls.out = ls.last ? ls.width : ls.heads * ls.width;
    } else {
      ls.out = ls.last ? d.num_classes : c.hidden;
    }
    ls.w = tensor++;
    ls.b = tensor++;
    if (s.kind == Kind::kGat) {
      ls.att_src = tensor++;
      ls.att_dst = tensor++;
    }
    s.layers.push_back(ls);
    in = ls.out;
  }
  return s;
}

// The multiplier (0 or 1/(1-p)) of a counter-based dropout decision.
double dropout_multiplier(const Spec& s, double rate, std::uint64_t kind, std::int64_t epoch,
                          int layer, std::int64_t vertex, std::int64_t element) {
  const float u = hash_to_unit(key_hash(s.seed, kind, std::uint64_t(epoch * 1024 + layer),
                                        std::uint64_t(vertex), std::uint64_t(element)));
  return u >= static_cast<float>(rate) ? 1.0 / (1.0 - rate) : 0.0;
}

double leaky(double x) {
  return x > 0 ? x : 0.2 * x;
}

struct LayerCache {
  Dense x;    // input after dropout
  Vec mask;   // dropout multipliers of x (empty: none)
  Dense agg;  // GCN / SAGE aggregation
  Dense pre;  // pre-activation (GAT hidden: concat O + b; last layer: logits)
  Dense t;    // GAT: X W
  Dense el, er;
  Vec alpha, attention_mask;  // GAT: per N+ entry and head, softmax and dropout multiplier
};

struct Pass {
  std::vector<LayerCache> layers;
  Dense logits;
};

Pass forward(const Dataset& d, const Graph& g, const Spec& s, const ReferenceParameters& params,
             std::int64_t epoch, bool training) {
  Pass pass;
  Dense h(g.n, d.feature_dim);
  for (std::size_t i = 0; i < h.v.size(); ++i) h.v[i] = d.features[i];
  for (std::size_t l = 0; l < s.layers.size(); ++l) {
    const LayerSpec& ls = s.layers[l];
    const Vec& w = params.tensors[ls.w];
    const Vec& b = params.tensors[ls.b];
    LayerCache c;
    c.x = h;
    if (training && s.dropout > 0) {
      c.mask.resize(c.x.v.size());
      for (std::int64_t v = 0; v < g.n; ++v)
        for (std::int64_t j = 0; j < ls.in; ++j) {
          const double m = dropout_multiplier(s, s.dropout, 1, epoch, int(l), v, j);
          c.mask[std::size_t(v * ls.in + j)] = m;
          c.x.at(v, j) *= m;
        }
    }
    if (s.kind == Kind::kGcn) {
      c.agg = Dense(g.n, ls.in);
      for (std::int64_t v = 0; v < g.n; ++v)
        for (edge_t e = g.ptr[v]; e < g.ptr[v + 1]; ++e) {
          const vertex_t u = g.src[e];
          const double norm = 1.0 / std::sqrt(g.deg_plus[u] * g.deg_plus[v]);
          for (std::int64_t j = 0; j < ls.in; ++j) c.agg.at(v, j) += norm * c.x.at(u, j);
        }
    } else if (s.kind == Kind::kSage) {
      c.agg = Dense(g.n, 2 * ls.in);
      for (std::int64_t v = 0; v < g.n; ++v) {
        for (std::int64_t j = 0; j < ls.in; ++j) c.agg.at(v, j) = c.x.at(v, j);
        const double count = double(g.ptr[v + 1] - g.ptr[v] - 1);
        for (edge_t e = g.ptr[v] + 1; e < g.ptr[v + 1]; ++e)
          for (std::int64_t j = 0; j < ls.in; ++j)
            c.agg.at(v, ls.in + j) += c.x.at(g.src[e], j) / count;
      }
    }
    if (s.kind != Kind::kGat) {
      c.pre = multiply(c.agg, w, ls.out);
      for (std::int64_t v = 0; v < g.n; ++v)
        for (std::int64_t j = 0; j < ls.out; ++j) c.pre.at(v, j) += b[std::size_t(j)];
      h = c.pre;
      if (!ls.last)
        for (double& x : h.v) x = std::max(x, 0.0);
    } else {
      const std::int64_t K = ls.heads, F = ls.width, KF = K * F;
      const Vec& a_src = params.tensors[ls.att_src];
      const Vec& a_dst = params.tensors[ls.att_dst];
      const double p_att = training ? s.attention_dropout : 0.0;
      c.t = multiply(c.x, w, KF);
      c.el = Dense(g.n, K);
      c.er = Dense(g.n, K);
      for (std::int64_t u = 0; u < g.n; ++u)
        for (std::int64_t hd = 0; hd < K; ++hd)
          for (std::int64_t f = 0; f < F; ++f) {
            c.el.at(u, hd) += c.t.at(u, hd * F + f) * a_src[std::size_t(hd * F + f)];
            c.er.at(u, hd) += c.t.at(u, hd * F + f) * a_dst[std::size_t(hd * F + f)];
          }
      c.alpha.assign(g.src.size() * std::size_t(K), 0.0);
      c.attention_mask.assign(g.src.size() * std::size_t(K), 1.0);
      Dense o(g.n, KF);
      for (std::int64_t v = 0; v < g.n; ++v)
        for (std::int64_t hd = 0; hd < K; ++hd) {
          double top = -std::numeric_limits<double>::infinity();
          for (edge_t e = g.ptr[v]; e < g.ptr[v + 1]; ++e)
            top = std::max(top, leaky(c.el.at(g.src[e], hd) + c.er.at(v, hd)));
          double sum = 0;
          for (edge_t e = g.ptr[v]; e < g.ptr[v + 1]; ++e)
            sum += std::exp(leaky(c.el.at(g.src[e], hd) + c.er.at(v, hd)) - top);
          for (edge_t e = g.ptr[v]; e < g.ptr[v + 1]; ++e) {
            const std::size_t slot = std::size_t(e * K + hd);
            c.alpha[slot] = std::exp(leaky(c.el.at(g.src[e], hd) + c.er.at(v, hd)) - top) / sum;
            if (p_att > 0)
              c.attention_mask[slot] =
                  dropout_multiplier(s, p_att, 2, epoch, int(l), v, (e - g.ptr[v]) * 256 + hd);
            const double weight = c.alpha[slot] * c.attention_mask[slot];
            for (std::int64_t f = 0; f < F; ++f)
              o.at(v, hd * F + f) += weight * c.t.at(g.src[e], hd * F + f);
          }
        }
      if (!ls.last) {
        c.pre = o;
        for (std::int64_t v = 0; v < g.n; ++v)
          for (std::int64_t j = 0; j < KF; ++j) c.pre.at(v, j) += b[std::size_t(j)];
        h = c.pre;
        for (double& x : h.v) x = x > 0 ? x : std::expm1(x);
      } else {
        c.pre = Dense(g.n, F);
        for (std::int64_t v = 0; v < g.n; ++v)
          for (std::int64_t f = 0; f < F; ++f) {
            double sum = 0;
            for (std::int64_t hd = 0; hd < K; ++hd) sum += o.at(v, hd * F + f);
            c.pre.at(v, f) = sum / double(K) + b[std::size_t(f)];
          }
        h = c.pre;
      }
    }
    pass.layers.push_back(std::move(c));
  }
  pass.logits = h;
  return pass;
}

// Loss over the training vertices and (optionally) its gradient w.r.t. the logits.
double loss_and_gradient(const Dataset& d, const Dense& logits, Dense* grad) {
  const double count = double(d.train.size());
  if (grad) *grad = Dense(logits.rows, logits.cols);
  double loss = 0;
  for (vertex_t v : d.train) {
    const std::int32_t y = d.labels[std::size_t(v)];
    if (y < 0) continue;
    const double* x = logits.row(v);
    const double top = *std::max_element(x, x + logits.cols);
    double sum = 0;
    for (std::int64_t j = 0; j < logits.cols; ++j) sum += std::exp(x[j] - top);
    const double log_sum = top + std::log(sum);
    loss += log_sum - x[y];
    if (grad)
      for (std::int64_t j = 0; j < logits.cols; ++j)
        grad->at(v, j) = (std::exp(x[j] - log_sum) - (j == y ? 1.0 : 0.0)) / count;
  }
  return count > 0 ? loss / count : 0.0;
}

ReferenceParameters zeros_like(const ReferenceParameters& p) {
  ReferenceParameters z;
  z.names = p.names;
  for (const Vec& t : p.tensors) z.tensors.emplace_back(t.size(), 0.0);
  return z;
}

// Gradient of the GAT edge part: given dO (n x K*F), accumulates dT, d a_src, d a_dst.
void gat_edge_backward(const Graph& g, const LayerSpec& ls, const LayerCache& c, const Vec& a_src,
                       const Vec& a_dst, const Dense& d_o, Dense& d_t, Vec& g_src, Vec& g_dst) {
  const std::int64_t K = ls.heads, F = ls.width;
  Dense d_el(g.n, K), d_er(g.n, K);
  for (std::int64_t v = 0; v < g.n; ++v)
    for (std::int64_t hd = 0; hd < K; ++hd) {
      Vec d_alpha;
      double dot = 0;
      for (edge_t e = g.ptr[v]; e < g.ptr[v + 1]; ++e) {
        const vertex_t u = g.src[e];
        const std::size_t slot = std::size_t(e * K + hd);
        const double weight = c.alpha[slot] * c.attention_mask[slot];
        double d_weight = 0;
        for (std::int64_t f = 0; f < F; ++f) {
          d_t.at(u, hd * F + f) += weight * d_o.at(v, hd * F + f);
          d_weight += d_o.at(v, hd * F + f) * c.t.at(u, hd * F + f);
        }
        d_alpha.push_back(d_weight * c.attention_mask[slot]);
        dot += c.alpha[slot] * d_alpha.back();
      }
      for (edge_t e = g.ptr[v]; e < g.ptr[v + 1]; ++e) {
        const vertex_t u = g.src[e];
        const std::size_t slot = std::size_t(e * K + hd);
        const double d_e = c.alpha[slot] * (d_alpha[std::size_t(e - g.ptr[v])] - dot);
        const double score = c.el.at(u, hd) + c.er.at(v, hd);
        const double d_s = score > 0 ? d_e : 0.2 * d_e;
        d_el.at(u, hd) += d_s;
        d_er.at(v, hd) += d_s;
      }
    }
  for (std::int64_t u = 0; u < g.n; ++u)
    for (std::int64_t hd = 0; hd < K; ++hd)
      for (std::int64_t f = 0; f < F; ++f) {
        const std::size_t j = std::size_t(hd * F + f);
        d_t.at(u, hd * F + f) += d_el.at(u, hd) * a_src[j] + d_er.at(u, hd) * a_dst[j];
        g_src[j] += d_el.at(u, hd) * c.t.at(u, hd * F + f);
        g_dst[j] += d_er.at(u, hd) * c.t.at(u, hd * F + f);
      }
}

ReferenceParameters backward(const Graph& g, const Spec& s, const ReferenceParameters& params,
                             const Pass& pass, Dense d_out) {
  ReferenceParameters grads = zeros_like(params);
  for (std::size_t l = s.layers.size(); l-- > 0;) {
    const LayerSpec& ls = s.layers[l];
    const LayerCache& c = pass.layers[l];
    const Vec& w = params.tensors[ls.w];
    Vec& g_w = grads.tensors[ls.w];
    Vec& g_b = grads.tensors[ls.b];
    Dense d_x;
    if (s.kind != Kind::kGat) {
      Dense d_pre = d_out;
      if (!ls.last)
        for (std::size_t i = 0; i < d_pre.v.size(); ++i)
          if (!(c.pre.v[i] > 0)) d_pre.v[i] = 0;
      add_transposed_product(c.agg, d_pre, g_w);
      add_column_sums(d_pre, g_b);
      const Dense d_agg = multiply_transposed(d_pre, w, c.agg.cols);
      d_x = Dense(g.n, ls.in);
      for (std::int64_t v = 0; v < g.n; ++v) {
        if (s.kind == Kind::kGcn) {
          for (edge_t e = g.ptr[v]; e < g.ptr[v + 1]; ++e) {
            const vertex_t u = g.src[e];
            const double norm = 1.0 / std::sqrt(g.deg_plus[u] * g.deg_plus[v]);
            for (std::int64_t j = 0; j < ls.in; ++j) d_x.at(u, j) += norm * d_agg.at(v, j);
          }
        } else {
          for (std::int64_t j = 0; j < ls.in; ++j) d_x.at(v, j) += d_agg.at(v, j);
          const double count = double(g.ptr[v + 1] - g.ptr[v] - 1);
          for (edge_t e = g.ptr[v] + 1; e < g.ptr[v + 1]; ++e)
            for (std::int64_t j = 0; j < ls.in; ++j)
              d_x.at(g.src[e], j) += d_agg.at(v, ls.in + j) / count;
        }
      }
    } else {
      const std::int64_t K = ls.heads, F = ls.width, KF = K * F;
      Dense d_o(g.n, KF);
      if (!ls.last) {
        for (std::size_t i = 0; i < d_o.v.size(); ++i) {
          const double z = c.pre.v[i];
          d_o.v[i] = d_out.v[i] * (z > 0 ? 1.0 : std::exp(z));
        }
        add_column_sums(d_o, g_b);
      } else {
        add_column_sums(d_out, g_b);
        for (std::int64_t v = 0; v < g.n; ++v)
          for (std::int64_t hd = 0; hd < K; ++hd)
            for (std::int64_t f = 0; f < F; ++f) d_o.at(v, hd * F + f) = d_out.at(v, f) / double(K);
      }
      Dense d_t(g.n, KF);
      gat_edge_backward(g, ls, c, params.tensors[ls.att_src], params.tensors[ls.att_dst], d_o, d_t,
                        grads.tensors[ls.att_src], grads.tensors[ls.att_dst]);
      add_transposed_product(c.x, d_t, g_w);
      d_x = multiply_transposed(d_t, w, ls.in);
    }
    if (l == 0) break;
    if (!c.mask.empty())
      for (std::size_t i = 0; i < d_x.v.size(); ++i) d_x.v[i] *= c.mask[i];
    d_out = std::move(d_x);
  }
  return grads;
}

}  // namespace

const std::vector<double>& ReferenceParameters::get(const std::string& name) const {
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return tensors[i];
  SLUICE_FAIL("reference: no parameter named '", name, "'");
}

std::vector<double>& ReferenceParameters::get(const std::string& name) {
  return const_cast<std::vector<double>&>(std::as_const(*this).get(name));
}

ReferenceParameters init_reference_parameters(const Dataset& dataset,
                                              const ReferenceConfig& config) {
  const Spec s = make_spec(dataset, config);
  ReferenceParameters p;
  auto glorot = [&](int layer, int q, std::int64_t count, double fan_in, double fan_out) {
    Vec t(static_cast<std::size_t>(count));
    const double bound = std::sqrt(6.0 / (fan_in + fan_out));
    for (std::int64_t i = 0; i < count; ++i) {
      const double r = hash_to_unit(
          key_hash(s.seed, 3, std::uint64_t(layer), std::uint64_t(q), std::uint64_t(i)));
      t[std::size_t(i)] = (2 * r - 1) * bound;
    }
    return t;
  };
  for (std::size_t l = 0; l < s.layers.size(); ++l) {
    const LayerSpec& ls = s.layers[l];
    const std::string prefix = "layer" + std::to_string(l) + ".";
    const std::int64_t rows = s.kind == Kind::kSage ? 2 * ls.in : ls.in;
    const std::int64_t cols = s.kind == Kind::kGat ? ls.heads * ls.width : ls.out;
    p.names.push_back(prefix + "W");
    p.tensors.push_back(glorot(int(l), 0, rows * cols, double(rows), double(cols)));
    p.names.push_back(prefix + "b");
    p.tensors.emplace_back(std::size_t(ls.out), 0.0);
    if (s.kind == Kind::kGat) {
      const std::int64_t KF = ls.heads * ls.width;
      p.names.push_back(prefix + "att_src");
      p.tensors.push_back(glorot(int(l), 1, KF, double(ls.width), 1.0));
      p.names.push_back(prefix + "att_dst");
      p.tensors.push_back(glorot(int(l), 2, KF, double(ls.width), 1.0));
    }
  }
  return p;
}

ReferenceGradients reference_gradients(const Dataset& dataset, const ReferenceConfig& config,
                                       const ReferenceParameters& parameters, std::int64_t epoch,
                                       bool training) {
  const Spec s = make_spec(dataset, config);
  const Graph g = build_graph(dataset);
  const Pass pass = forward(dataset, g, s, parameters, epoch, training);
  Dense d_logits;
  ReferenceGradients result;
  result.loss = loss_and_gradient(dataset, pass.logits, &d_logits);
  result.gradients = backward(g, s, parameters, pass, std::move(d_logits));
  return result;
}

double reference_loss(const Dataset& dataset, const ReferenceConfig& config,
                      const ReferenceParameters& parameters, std::int64_t epoch, bool training) {
  const Spec s = make_spec(dataset, config);
  const Graph g = build_graph(dataset);
  return loss_and_gradient(dataset, forward(dataset, g, s, parameters, epoch, training).logits,
                           nullptr);
}

ReferenceResult train_reference(const Dataset& dataset, const ReferenceConfig& config, int epochs) {
  SLUICE_EXPECTS(config.optimizer == "sgd" || config.optimizer == "adam",
                 "reference: unknown optimizer '", config.optimizer, "'");
  const Spec s = make_spec(dataset, config);
  const Graph g = build_graph(dataset);
  ReferenceResult result;
  ReferenceParameters& p = result.final_parameters;
  p = init_reference_parameters(dataset, config);
  ReferenceParameters m = zeros_like(p), v = zeros_like(p);
  const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  for (int t = 0; t < epochs; ++t) {
    const Pass pass = forward(dataset, g, s, p, t, true);
    Dense d_logits;
    result.losses.push_back(loss_and_gradient(dataset, pass.logits, &d_logits));
    const ReferenceParameters grads = backward(g, s, p, pass, std::move(d_logits));
    const double step = t + 1;
    for (std::size_t k = 0; k < p.tensors.size(); ++k)
      for (std::size_t i = 0; i < p.tensors[k].size(); ++i) {
        double& w = p.tensors[k][i];
        const double grad = grads.tensors[k][i] + config.weight_decay * w;
        if (config.optimizer == "sgd") {
          w -= config.lr * grad;
        } else {
          double& mk = m.tensors[k][i];
          double& vk = v.tensors[k][i];
          mk = beta1 * mk + (1 - beta1) * grad;
          vk = beta2 * vk + (1 - beta2) * grad * grad;
          const double m_hat = mk / (1 - std::pow(beta1, step));
          const double v_hat = vk / (1 - std::pow(beta2, step));
          w -= config.lr * m_hat / (std::sqrt(v_hat) + eps);
        }
      }
  }
  return result;
}

std::vector<double> reference_logits(const Dataset& dataset, const ReferenceConfig& config,
                                     const ReferenceParameters& parameters) {
  const Spec s = make_spec(dataset, config);
  const Graph g = build_graph(dataset);
  return forward(dataset, g, s, parameters, 0, false).logits.v;
}

ReferenceAccuracy evaluate_reference(const Dataset& dataset, const ReferenceConfig& config,
                                     const ReferenceParameters& parameters) {
  const std::vector<double> logits = reference_logits(dataset, config, parameters);
  const std::int64_t classes = dataset.num_classes;
  auto accuracy = [&](const std::vector<vertex_t>& split) {
    std::int64_t labeled = 0, correct = 0;
    for (vertex_t v : split) {
      const std::int32_t y = dataset.labels[std::size_t(v)];
      if (y < 0) continue;
      const double* x = logits.data() + std::int64_t(v) * classes;
      const std::int64_t best = std::max_element(x, x + classes) - x;  // first maximum
      ++labeled;
      correct += best == y;
    }
    return labeled > 0 ? double(correct) / double(labeled) : 0.0;
  };
  return ReferenceAccuracy{accuracy(dataset.train), accuracy(dataset.valid),
                           accuracy(dataset.test)};
}

}  // namespace sluice::test
