// A temporary file with no name: written once, read back, gone when closed or when the process
// dies, so nothing is ever left behind and nothing planted can be opened in its place.
#pragma once

#include "write_buffer.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace lookup {

class ScratchFile {
public:
    // In `folder` (O_TMPFILE; where the file system lacks it, a random name created with O_EXCL
    // and unlinked at once, named as the daemon's start sweeps leftovers: scratch.tmp.<16 hex>). On failure error() says why and nothing else does anything.
    explicit ScratchFile(const std::string& folder);
    ~ScratchFile();
    ScratchFile(const ScratchFile&) = delete;
    ScratchFile& operator=(const ScratchFile&) = delete;

    // Buffered; the first error is kept.
    void append(const void* data, size_t size);
    // Flushes what append() buffered; from then on the file is read with read_at().
    bool finish_writing(std::string* error);
    // Up to `size` bytes from `offset` (fewer at the end); 0 and an error past it or on failure.
    size_t read_at(uint64_t offset, void* data, size_t size, std::string* error) const;

    [[nodiscard]] uint64_t size() const { return m_size; }

private:
    [[nodiscard]] std::string reason(const char* what) const;

    int m_fd = -1;
    int m_errno = 0;
    uint64_t m_size = 0;
    WriteBuffer m_buffer;
};

}  // namespace lookup
