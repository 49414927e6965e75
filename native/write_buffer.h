// Buffered writes to a file descriptor, shared by the files this core writes (atomic_file.h,
// scratch_file.h): small writes would each cost a system call.
#pragma once

#include <cstddef>
#include <vector>

namespace lookup {

// The owner keeps the error (an errno value, 0 while none): once it is set nothing more is
// written, and the owner reports it where its callers look.
class WriteBuffer {
public:
    explicit WriteBuffer(size_t capacity) : m_capacity(capacity) { m_bytes.reserve(capacity); }

    // Appends, writing the buffer out at the descriptor's offset each time it fills.
    void write(int fd, const void* data, size_t size, int* error);
    void flush(int fd, int* error);
    // Frees the buffer, once nothing more will be written.
    void release() { std::vector<unsigned char>().swap(m_bytes); }

private:
    size_t m_capacity;
    std::vector<unsigned char> m_bytes;
};

}  // namespace lookup
