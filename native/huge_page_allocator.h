// An allocator for large, randomly accessed tables: big blocks are 2 MiB aligned and offered to
// the kernel's transparent huge pages (Linux; elsewhere plain aligned blocks), so look-ups miss
// the TLB far less often.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#include <sys/mman.h>

namespace lookup {

template <class T>
struct HugePageAllocator {
    using value_type = T;

    static constexpr size_t k_huge_page = size_t{2} << 20;

    HugePageAllocator() = default;
    template <class U>
    HugePageAllocator(const HugePageAllocator<U>&) {}

    [[nodiscard]] T* allocate(size_t n) {
        const size_t bytes = n * sizeof(T);
        const size_t alignment = bytes >= k_huge_page ? k_huge_page : (alignof(T) > 64 ? alignof(T) : 64);
        const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
        void* p = std::aligned_alloc(alignment, rounded);
        if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
        // Advice only (Linux): where huge pages are off or exhausted, ordinary pages are used.
        if (alignment == k_huge_page) ::madvise(p, rounded, MADV_HUGEPAGE);
#endif
        return static_cast<T*>(p);
    }
    void deallocate(T* p, size_t) noexcept { std::free(p); }

    template <class U>
    bool operator==(const HugePageAllocator<U>&) const { return true; }
    template <class U>
    bool operator!=(const HugePageAllocator<U>&) const { return false; }
};

}  // namespace lookup
