// Cache files opened for reading, and their bytes: read once into private memory, or mapped (POSIX).
//
// Cache files may come from an untrusted repository and may be rewritten, truncated or replaced
// by another process while open. A mapping of such a file would let a change show up in bytes
// that were already checked, or raise SIGBUS on a truncated page; a private copy cannot change
// under the reader. So only files that no other user can change, and that this program never
// changes in place (the static cache store's copies, static_cache_store.h), are mapped. Only
// regular files are opened: the final path component is never followed if it is a symbolic
// link, and a FIFO or device is refused without blocking.
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

// A regular file open for reading, its status taken on the open descriptor. Nothing is read
// until asked, so a header can be checked against the size before anything large is read.
class ReadableFile {
public:
    ReadableFile() = default;
    ReadableFile(const ReadableFile&) = delete;
    ReadableFile& operator=(const ReadableFile&) = delete;
    ~ReadableFile() { close(); }

    // On failure returns false and sets `error` to a short reason (no path: callers add it),
    // e.g. "not a regular file (a FIFO)". open_at() opens `name` inside the open folder
    // `folder_fd` (-1: the working folder).
    bool open(const std::string& path, std::string* error) { return open_at(-1, path, error); }
    bool open_at(int folder_fd, const std::string& name, std::string* error);
    void close();

    // Exactly `size` bytes at `offset`, or false with `error` set (a file shorter than its
    // status said: "truncated while being read").
    bool read_at(uint64_t offset, void* out, size_t size, std::string* error) const;

    [[nodiscard]] int fd() const { return m_fd; }
    [[nodiscard]] uint64_t size() const { return m_identity.size; }
    [[nodiscard]] uint32_t owner() const { return m_owner; }
    [[nodiscard]] const FileIdentity& identity() const { return m_identity; }

private:
    int m_fd = -1;
    uint32_t m_owner = 0;
    FileIdentity m_identity;
};

// A file's bytes in read-only, page-aligned memory: a private copy, a mapping, or (for the
// fuzzer and tests) memory that belongs to the caller.
class FileBytes {
public:
    FileBytes() = default;
    FileBytes(FileBytes&& other) noexcept;
    FileBytes& operator=(FileBytes&& other) noexcept;
    FileBytes(const FileBytes&) = delete;
    FileBytes& operator=(const FileBytes&) = delete;
    ~FileBytes();

    // Reads the whole file into private memory (refused unread beyond half of this machine's
    // memory). On failure returns false and sets `error` to a short reason without the path.
    bool read(const std::string& path, std::string* error);
    bool read(const ReadableFile& file, std::string* error);
    // Maps the whole file read-only: only for a file no other user can write and that is never
    // changed in place (a truncation would raise SIGBUS in the reader).
    bool map(const ReadableFile& file, std::string* error);
    // Memory that the caller keeps alive and unchanged until close().
    void borrow(const unsigned char* data, size_t size);
    void close();

    [[nodiscard]] const unsigned char* data() const { return m_data; }
    [[nodiscard]] size_t size() const { return m_size; }
    [[nodiscard]] bool mapped() const { return m_kind == Kind::mapped; }

private:
    enum class Kind { none, copied, mapped, borrowed };

    const unsigned char* m_data = nullptr;
    size_t m_size = 0;
    Kind m_kind = Kind::none;
};

}  // namespace lookup
