// The schedule names, one batch ahead, what each batch's sparse products read of its chunk CSR
// (Device::prefetch_csr: the CUDA backend copies those arrays of a host-resident CSR into device
// memory then, so the products need not copy them on the compute lane). The CPU backend keeps
// the announcements as the CUDA backend keeps its two staging slots and counts in
// h2d_csr_in_line_bytes what a product reads unannounced: across models, depths, cached and
// recomputed aggregations, partitions, --comm modes, training steps and evaluations that count
// stays 0 (Schedule::Impl::products_read() names every product), and an unannounced product
// counts.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "kernels/ops.hpp"
#include "tests/support/configs.hpp"
#include "tests/support/plans.hpp"
#include "tests/support/random_graph.hpp"
#include "train/model.hpp"
#include "train/schedule.hpp"

namespace sluice {
namespace {

TEST(CsrPrefetch, EveryProductIsAnnouncedAhead) {
  const Dataset d = test::random_dataset(700, 5, 12, 5, 29, test::ReverseEdgesIntoSources::kAdd);
  struct Layout {
    int partitions, chunks;
    CommMode comm;
  };
  for (const Layout layout : {Layout{1, 1, CommMode::kP2pReuse}, Layout{1, 4, CommMode::kP2pReuse},
                              Layout{2, 3, CommMode::kP2pReuse}, Layout{2, 3, CommMode::kBaseline},
                              Layout{3, 2, CommMode::kP2p}}) {
    const Plan plan = test::make_plan(d, test::plan_options(layout.partitions, layout.chunks));
    for (const std::string model : {"gcn", "sage", "gat"})
      for (const int layers : {2, 3})
        for (const bool cache : {true, false})
          for (const LayerZeroOrder order :
               {LayerZeroOrder::kAggregateFirst, LayerZeroOrder::kTransformFirst}) {
            if (model == "gat" && order == LayerZeroOrder::kTransformFirst) continue;
            SCOPED_TRACE(
                cat(model, ", ", layers, " layers, ", cache ? "cached" : "recomputed", ", P = ",
                    layout.partitions, ", C = ", layout.chunks, ", ", comm_mode_name(layout.comm),
                    order == LayerZeroOrder::kTransformFirst ? ", layer 0 transforms first" : ""));
            const ModelSpec spec = test::model_spec(test::model_shape(model, layers)
                                                        .in_dim(d.feature_dim)
                                                        .hidden(8)
                                                        .classes(d.num_classes)
                                                        .heads(2)
                                                        .layer_zero_order(order));
            std::unique_ptr<Backend> backend =
                make_cpu_backend(test::backend_options(plan.partitions));
            ScheduleOptions options;
            options.dropout = 0.3f;
            options.seed = 5;
            options.comm = layout.comm;
            options.cache_intermediates = cache;
            Schedule schedule(*backend, d, plan, spec, options);
            schedule.set_parameters(init_parameters(spec, 3));
            for (int step = 1; step <= 2; ++step) {
              schedule.reset_counters();
              schedule.forward_backward(step);
              schedule.adam_step(0.05f, 0.f, step);
              EXPECT_EQ(schedule.counters().h2d_csr_in_line_bytes, 0) << "step " << step;
              schedule.reset_counters();
              schedule.evaluate();
              EXPECT_EQ(schedule.counters().h2d_csr_in_line_bytes, 0) << "evaluation " << step;
            }
          }
  }
}

// What the count sees: a product with nothing announced, one whose access was announced, one
// that needs the transpose after only the rows were, and a matrix announced two matrices ago
// (its slot taken since).
TEST(CsrPrefetch, UnannouncedProductsCount) {
  std::unique_ptr<Backend> backend = make_cpu_backend(test::backend_options(1));
  Device& d = backend->device(0);
  // 2 x 3, entries (0,0) (0,2) (1,1): rows 3 offsets + 3 columns, transpose 4 + 3 (8-byte
  // offsets, 4-byte indices).
  const std::vector<edge_t> indptr = {0, 2, 3};
  const std::vector<vertex_t> columns = {0, 2, 1};
  const Csr a = d.upload_csr(indptr, columns, 3, "A");
  const Csr b = d.upload_csr(indptr, columns, 3, "B");
  const Csr c = d.upload_csr(indptr, columns, 3, "C");
  const std::vector<float> values = {1.f, 2.f, 3.f};
  const Mat v = d.upload_constant(values, 1, 3, "values");
  Mat x = d.alloc(3, 2, "x"), y = d.alloc(2, 2, "y");
  d.fill(x, 1.f);
  const std::int64_t rows_bytes = 3 * 8 + 3 * 4, transposed_bytes = 4 * 8 + 3 * 4;
  d.spmm(a, v.data, x, y);
  EXPECT_EQ(d.counters().h2d_csr_in_line_bytes, rows_bytes);
  d.spmm(a, v.data, x, y);  // staged by the first product
  EXPECT_EQ(d.counters().h2d_csr_in_line_bytes, rows_bytes);
  d.reset_counters();
  d.prefetch_csr(b, CsrAccess::kRows, CsrReuse::kOnce);
  d.spmm(b, v.data, x, y);
  EXPECT_EQ(d.counters().h2d_csr_in_line_bytes, 0);
  d.spmm_transpose_add(b, v.data, y, x);
  EXPECT_EQ(d.counters().h2d_csr_in_line_bytes, transposed_bytes);
  d.reset_counters();
  d.prefetch_csr(a, CsrAccess::kBoth, CsrReuse::kOnce);
  d.prefetch_csr(c, CsrAccess::kBoth, CsrReuse::kOnce);  // takes b's slot
  d.prefetch_csr(b, CsrAccess::kRows, CsrReuse::kOnce);  // takes a's
  d.spmm(c, v.data, x, y);
  d.spmm_transpose_add(c, v.data, y, x);
  d.spmm(b, v.data, x, y);
  EXPECT_EQ(d.counters().h2d_csr_in_line_bytes, 0);
  d.spmm(a, v.data, x, y);
  EXPECT_EQ(d.counters().h2d_csr_in_line_bytes, rows_bytes);
}

}  // namespace
}  // namespace sluice
