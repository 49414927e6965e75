#include "page_release.h"

#include <sys/mman.h>
#include <unistd.h>

namespace lookup {

namespace {

// Views this close count as one run (the gap is another view's bytes or padding).
constexpr uintptr_t k_max_gap = 64 * 1024;
// A run is released once this large: a system call per document would cost more than it saves.
constexpr uintptr_t k_run_bytes = 32 * 1024 * 1024;

}  // namespace

void PageRelease::done_with(const void* data, size_t size) {
    if (!m_enabled || size == 0) return;
    const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
    if (m_end == 0 || begin < m_end || begin - m_end > k_max_gap) {
        flush();
        m_begin = begin;
    }
    m_end = begin + size;
    if (m_end - m_begin >= k_run_bytes) flush();
}

void PageRelease::flush() {
    if (m_end == 0) return;
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t first = (m_begin + page - 1) / page * page;
    const uintptr_t last = m_end / page * page;
    // Advice only: if it fails the pages just stay resident.
    if (first < last) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
    m_begin = m_end = 0;
}

}  // namespace lookup
