// Implementation of train/layout/vertex_data.hpp.
#include "train/layout/vertex_data.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/log.hpp"
#include "kernels/cuda_memory_rules.hpp"
#include "train/layout/memory_estimate.hpp"

namespace sluice {

bool keeps_intermediates(const ModelLayers& model, const HostDataOptions& options, int layer) {
  if (model.layers[std::size_t(layer)].aggregate_width == 0 || !options.cache_intermediates)
    return false;
  return model.kind != ModelKind::kGat ||
         gat_head_outputs(options.cache_intermediates, options.host_precision) ==
             GatHeadOutputs::kKept;
}

bool backward_reads_inputs(const ModelLayers& model, const HostDataOptions& options, int layer) {
  return model.kind == ModelKind::kGat || !keeps_intermediates(model, options, layer);
}

bool keeps_a_block(const ModelLayers& model, const HostDataOptions& options, int layer,
                   int chunks) {
  const bool last_transforms = model.kind == ModelKind::kGat || model.layers.back().transform_first;
  return chunks == 1 && options.host_precision == HostPrecision::kFp32 && last_transforms &&
         layer + 2 == static_cast<int>(model.layers.size()) &&
         keeps_intermediates(model, options, layer);
}

std::vector<HostMatrixShape> host_matrix_shapes(const ModelLayers& model,
                                                const LayoutOptions& layout,
                                                const HostDataOptions& options,
                                                std::int64_t num_nodes, int chunks) {
  std::vector<HostMatrixShape> out;
  out.push_back(
      {HostMatrixRole::kInput, 0, "H^0 (features)", num_nodes, model.layers.front().in_width});
  for (const LayerShape& layer : model.layers) {
    const LayerRoles roles = layer_roles(model, layer.index, layout);
    const int l = layer.index;
    if (l > 0)
      out.push_back({HostMatrixRole::kInput, l, roles.pretransformed ? cat("T^", l) : cat("H^", l),
                     num_nodes, roles.input_width});
    // The fused last layer keeps its loss gradients and aggregations on the device.
    if (layer.last) continue;
    if (roles.stores_transform)
      out.push_back(
          {HostMatrixRole::kGradient, l + 1, cat("dT^", l + 1), num_nodes, roles.output_width});
    else
      out.push_back(
          {HostMatrixRole::kGradient, l + 1, cat("G^", l + 1), num_nodes, layer.out_width});
    if (keeps_intermediates(model, options, l) && !keeps_a_block(model, options, l, chunks))
      out.push_back(
          {HostMatrixRole::kAggregation, l, cat("A^", l), num_nodes, layer.aggregate_width});
  }
  for (HostMatrixShape& shape : out) shape.precision = options.host_precision;
  return out;
}

std::vector<double> vertex_data_priorities(const ModelLayers& model, const LayoutOptions& layout,
                                           const HostDataOptions& options, std::int64_t num_nodes,
                                           std::int64_t gathered_rows, int chunks) {
  const double gathered = num_nodes > 0 ? double(gathered_rows) / double(num_nodes) : 0.;
  std::vector<double> out;
  for (const HostMatrixShape& shape :
       host_matrix_shapes(model, layout, options, num_nodes, chunks)) {
    if (shape.role != HostMatrixRole::kInput) {
      out.push_back(2.);  // A^l: stored, then loaded; G^l: flushed, then loaded
      continue;
    }
    const LayerShape& layer = model.layers[std::size_t(shape.layer)];
    const bool reads_again = !layer.last && backward_reads_inputs(model, options, layer.index);
    const bool evaluation_cache = shape.layer == 0 && options.evaluation_cache &&
                                  options.host_precision == HostPrecision::kFp32 &&
                                  model.kind != ModelKind::kGat && layer.aggregate_width > 0 &&
                                  !layer.transform_first;
    const double evaluation =
        evaluation_cache ? double(layer.aggregate_width) / double(layer.in_width) : gathered;
    out.push_back(gathered * (1. + (reads_again ? 1. : 0.)) + evaluation +
                  (shape.layer > 0 ? 2. : 0.));
  }
  return out;
}

namespace {

// One device's share of the forecast.
struct DeviceForecast {
  std::int64_t link_bytes = 0, resident_bytes = 0;
  std::string resident;
  double recompute_seconds = 0;
};

}  // namespace

std::string recompute_note(const LinkForecast& forecast) {
  if (forecast.recompute_seconds <= 0) return {};
  return cat(", intermediates recomputed (+",
             format_number(std::round(forecast.recompute_seconds * 1000) / 1000), " s)");
}

LinkForecast forecast_link(const std::vector<PartitionProfile>& profiles, const ModelLayers& model,
                           const LayoutOptions& layout, const HostDataOptions& options,
                           IntermediatesChoice intermediates, std::int64_t budget,
                           const LinkModel& link) {
  SLUICE_EXPECTS(!profiles.empty() && budget > 0, "forecast_link: ", profiles.size(),
                 " partitions, budget ", budget);
  const int chunks = static_cast<int>(profiles.front().lists.size());
  const std::int64_t capacity = budget - budget / cuda::kBudgetHeadroomDivisor;
  const int passes = 2 * static_cast<int>(model.layers.size());
  HostDataOptions recomputed = options;
  recomputed.cache_intermediates = false;
  // Each partition's rows and the rows its chunks gather.
  struct Rows {
    std::int64_t rows = 0, gathered = 0, entries = 0;
  };
  std::vector<Rows> sizes;
  for (const PartitionProfile& profile : profiles) {
    Rows r;
    for (const ChunkListSizes& list : profile.lists) {
      r.rows += list.rows;
      r.gathered += list.loads;
      r.entries += list.nnz;
    }
    sizes.push_back(r);
  }
  // Each partition's layout estimate with and without the overlap buffers, under `host`.
  struct Estimates {
    GpuMemoryEstimate with_overlap, without_overlap;
  };
  const auto estimates = [&](const HostDataOptions& host) {
    std::vector<Estimates> out;
    for (const PartitionProfile& profile : profiles) {
      LayoutOptions o = layout;
      o.gat_head_outputs = gat_head_outputs(host.cache_intermediates, host.host_precision);
      o.overlap = true;
      const GpuMemoryEstimate with = estimate_layout_memory(partition_layout(profile, model, o));
      o.overlap = false;
      out.push_back({with, estimate_layout_memory(partition_layout(profile, model, o))});
    }
    return out;
  };
  // choose_residency()'s needs, so that the forecast gives up what sluice-train gives up: what
  // the device holds when the vertex data are placed (its setup), and with the scratch sized on
  // first use.
  const auto needs = [&](const HostDataOptions& host, const std::vector<Estimates>& e) {
    std::vector<ResidencyNeed> out;
    for (std::size_t p = 0; p < profiles.size(); ++p) {
      const std::int64_t with = e[p].with_overlap.cuda_setup + e[p].with_overlap.cuda_scratch;
      const std::int64_t without =
          e[p].without_overlap.cuda_setup + e[p].without_overlap.cuda_scratch;
      ResidencyNeed need{with, with - without, 0};
      for (const HostMatrixShape& m :
           host_matrix_shapes(model, layout, host, sizes[p].rows, chunks))
        need.vertex += m.bytes();
      out.push_back(need);
    }
    return out;
  };
  const std::vector<std::int64_t> capacities(profiles.size(), capacity);
  const std::vector<Estimates> as_given = estimates(options);
  const std::vector<ResidencyNeed> cached = needs(options, as_given);
  const std::vector<ResidencyNeed> uncached =
      options.cache_intermediates ? needs(recomputed, estimates(recomputed)) : cached;
  const ResidencyChoice current{layout.overlap, options.cache_intermediates};
  const ResidencyChoice choice =
      choose_residency(cached, uncached, capacities, current, intermediates);
  const bool all_resident = choice.overlap != current.overlap ||
                            choice.cache_intermediates != current.cache_intermediates ||
                            std::all_of(cached.begin(), cached.end(), [&](const ResidencyNeed& n) {
                              return n.setup + n.vertex <= capacity;
                            });
  LinkForecast out;
  out.chunks = chunks;
  for (std::size_t p = 0; p < profiles.size(); ++p) {
    DeviceForecast d;
    const auto [rows, gathered, entries] = sizes[p];
    if (all_resident) {
      const ResidencyNeed& n = choice.cache_intermediates ? cached[p] : uncached[p];
      d.resident_bytes = n.vertex;
      d.resident = "every matrix";
      // Each layer that would keep A^l aggregates its entries' input rows once more in its
      // backward pass (fp32 rows on the device).
      if (options.cache_intermediates && !choice.cache_intermediates)
        for (const LayerShape& layer : model.layers)
          if (!layer.last && keeps_intermediates(model, options, layer.index))
            d.recompute_seconds += double(entries) * double(layer.aggregate_width) *
                                   double(sizeof(float)) / link.in_place_bytes_per_second;
    } else {
      const std::vector<HostMatrixShape> shapes =
          host_matrix_shapes(model, layout, options, rows, chunks);
      const std::vector<double> priority =
          vertex_data_priorities(model, layout, options, rows, gathered, chunks);
      std::vector<std::size_t> order(shapes.size());
      std::iota(order.begin(), order.end(), std::size_t(0));
      std::stable_sort(order.begin(), order.end(),
                       [&](std::size_t a, std::size_t b) { return priority[a] > priority[b]; });
      const std::int64_t room =
          capacity -
          (layout.overlap ? as_given[p].with_overlap : as_given[p].without_overlap).cuda_setup;
      // Constants the room cannot hold are staged into device memory once per pass.
      if (room < 0) d.link_bytes += -room * passes;
      std::int64_t free = std::max<std::int64_t>(0, room);
      for (const std::size_t i : order) {
        const std::int64_t bytes = shapes[i].bytes();
        if (cuda::rounded(bytes) <= free) {  // charged in granules
          free -= cuda::rounded(bytes);
          d.resident_bytes += bytes;
          d.resident += cat(d.resident.empty() ? "" : ", ", shapes[i].name);
        } else {
          d.link_bytes += static_cast<std::int64_t>(priority[i] * double(bytes));
        }
      }
      if (d.resident.empty()) d.resident = "none";
    }
    // The busiest device sets the epoch.
    const double busy = double(d.link_bytes) / link.bytes_per_second + d.recompute_seconds;
    if (p == 0 || busy > out.seconds) {
      out.link_bytes = d.link_bytes;
      out.resident_bytes = d.resident_bytes;
      out.resident = d.resident;
      out.recompute_seconds = d.recompute_seconds;
      out.seconds = busy;
    }
  }
  out.seconds += chunks * link.seconds_per_chunk;
  return out;
}

}  // namespace sluice
