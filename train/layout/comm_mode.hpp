// The transfer schemes of the schedule (sluice-train --comm), shared by the schedule and its
// buffer layout.
#pragma once

namespace sluice {

// How rows reach a chunk (docs/design.md, "What a batch needs"): baseline = every chunk loads all
// its neighbors from host; p2p = each vertex of T_c crosses the host link once per batch, remote
// neighbors come from the owner's buffer; p2p+reuse = additionally keep R_c^p in place.
enum class CommMode { kBaseline, kP2p, kP2pReuse };

}  // namespace sluice
