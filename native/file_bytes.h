// The whole content of a cache file, read once into private memory (POSIX).
//
// Cache files may come from an untrusted repository and may be rewritten, truncated or replaced
// by another process while open. A shared mapping would let such a change show up in bytes that
// were already checked, or raise SIGBUS on a truncated page; a private copy cannot change under
// the reader. Only regular files are read: the final path component is never followed if it is a
// symbolic link, and a FIFO or device is refused without blocking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lookup {

// What tells a file's content on disk apart without reading it. The change time is kept
// besides the modification time because no process can set it back after a rewrite.
struct FileIdentity {
    uint64_t device = 0;
    uint64_t inode = 0;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;

    bool operator==(const FileIdentity& o) const {
        return device == o.device && inode == o.inode && size == o.size && mtime_ns == o.mtime_ns &&
               ctime_ns == o.ctime_ns;
    }
    bool operator!=(const FileIdentity& o) const { return !(*this == o); }
};

// The identity of what is at `path` now (a symbolic link is not followed); false if nothing is.
[[nodiscard]] bool identity_at(const std::string& path, FileIdentity* identity);

class FileBytes {
public:
    FileBytes() = default;
    FileBytes(FileBytes&& other) noexcept;
    FileBytes& operator=(FileBytes&& other) noexcept;
    FileBytes(const FileBytes&) = delete;
    FileBytes& operator=(const FileBytes&) = delete;
    ~FileBytes();

    // Reads the whole file. On failure returns false and sets `error` to a short reason (no
    // path: callers add it), e.g. "not a regular file (a FIFO)".
    bool read(const std::string& path, std::string* error);
    void close();

    // Page-aligned and read-only; identity() is the file's as it was when read.
    [[nodiscard]] const unsigned char* data() const { return m_data; }
    [[nodiscard]] size_t size() const { return m_size; }
    [[nodiscard]] const FileIdentity& identity() const { return m_identity; }

private:
    const unsigned char* m_data = nullptr;
    size_t m_size = 0;
    FileIdentity m_identity;
};

}  // namespace lookup
