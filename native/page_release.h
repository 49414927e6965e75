// Hands back to the kernel the pages of a file mapping that a sequential reader is done with,
// so that a pass over a mapped file larger than the memory budget does not leave it resident.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lookup {

// Only for views of a read-only file mapping: there MADV_DONTNEED just unmaps pages, which are
// read again from the page cache when touched; on anonymous memory it would zero them. Views
// that follow each other in memory are released together, in large runs, and only the pages
// wholly inside a run, so a page shared with a view not yet read stays.
class PageRelease {
public:
    explicit PageRelease(bool enabled) : m_enabled(enabled) {}
    PageRelease(const PageRelease&) = delete;
    PageRelease& operator=(const PageRelease&) = delete;
    ~PageRelease() { flush(); }

    void done_with(const void* data, size_t size);
    void flush();

private:
    bool m_enabled;
    uintptr_t m_begin = 0;
    uintptr_t m_end = 0;
};

}  // namespace lookup
