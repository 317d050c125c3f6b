// Process memory readings (Linux /proc) for logs and metrics, and the guard that checks an
// allocation sized by input values against what the machine can still give.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace sluice {

// Makes glibc serve every allocation of 1 MiB or more with its own mapping, returned to the
// system when freed. By default glibc raises that threshold up to 32 MiB as large blocks are
// freed, and blocks below it come from heaps that keep freed memory: a setup that builds and
// frees thousands of per-chunk lists of a few MiB then holds gigabytes it no longer uses. The
// commands call it first thing.
void return_large_blocks_when_freed();

// Faults in the pages of `bytes` bytes at `data` with every OpenMP thread (MADV_POPULATE_WRITE, a
// hint: ignored where the kernel lacks it). Faulting in gigabytes from one thread is a large
// serial part of reading or building big arrays; a fill after it is a fast pass over resident
// memory.
void populate_in_parallel(void* data, std::size_t bytes);

// Resizes `values`, which must be empty, to `size` value-initialized elements, their pages
// faulted in by every thread first (populate_in_parallel()).
template <typename T>
void resize_populated(std::vector<T>& values, std::size_t size) {
  values.reserve(size);
  populate_in_parallel(values.data(), size * sizeof(T));
  values.resize(size);
}

// `values` (empty) becomes a copy of `from`, its pages faulted in by every thread first.
template <typename T>
void assign_populated(std::vector<T>& values, const std::vector<T>& from) {
  values.reserve(from.size());
  populate_in_parallel(values.data(), from.size() * sizeof(T));
  values.assign(from.begin(), from.end());
}

// Resizes `values` to `size` elements that the caller then overwrites: growing past its capacity
// takes a fresh allocation whose pages every thread faults in first (the old elements are not
// kept); within its capacity it keeps the pages it has.
template <typename T>
void resize_for_overwrite(std::vector<T>& values, std::size_t size) {
  if (size > values.capacity()) {
    std::vector<T> fresh;
    resize_populated(fresh, size);
    values.swap(fresh);
  } else {
    values.resize(size);
  }
}

std::uint64_t current_rss_bytes();  // VmRSS
std::uint64_t peak_rss_bytes();     // VmHWM, the high-water mark since start

// Bytes this process can still allocate: MemAvailable, lowered to the cgroup's remaining
// allowance (memory.max - memory.current) where one is set.
std::int64_t available_host_memory_bytes();

// The product of non-negative factors in bytes, saturating at INT64_MAX (input values can make
// the exact product overflow).
std::int64_t saturating_bytes(std::initializer_list<std::int64_t> factors);
// a + b, saturating at INT64_MAX (both non-negative).
std::int64_t saturating_add(std::int64_t a, std::int64_t b);

// An allocation whose size follows from input values: what it is for and the input that sized
// it, both for the message.
struct MemoryNeed {
  std::int64_t bytes = 0;
  std::string purpose;  // e.g. "the in-edge CSR of 1200000000 vertices"
  std::string cause;    // e.g. "vertex id 1199999999 in edges.bin (pair 0)"
};

// Throws InputError "<cause>: <purpose> needs about X of host memory, but only Y is available"
// when need.bytes exceed available_host_memory_bytes(). Call it before allocating.
void require_memory(const MemoryNeed& need);

}  // namespace sluice
