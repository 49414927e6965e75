// A file written under a temporary name beside its destination and renamed over it only once
// complete, so that neither a reader nor an interruption ever sees a partial file.
//
// The temporary name ends in random bytes and is created with O_EXCL | O_NOFOLLOW, so a file or
// symbolic link planted beside the destination is never opened, followed or overwritten (a name
// already taken is skipped for another). It gets `mode` less the umask (by default 0644, the mode
// a new file gets; 0600 for a file that holds the user's code), so it never shows more than the
// destination will. commit() syncs the file, renames it and
// syncs the folder, so the new content survives a crash once commit() returns true.
#pragma once

#include "write_buffer.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace lookup {

class AtomicFile {
public:
    explicit AtomicFile(std::string path, unsigned mode = 0644);
    ~AtomicFile();  // removes the temporary file unless commit() succeeded
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;

    // Buffered; the first error is kept and reported by commit().
    void write(const void* data, size_t size);
    // Overwrites bytes already written (e.g. a checksum in a header).
    void write_at(uint64_t offset, const void* data, size_t size);
    // Flushes, syncs, renames, syncs the folder. On failure returns false with a one-line reason.
    bool commit(std::string* error);

private:
    void flush();
    void create_temporary();

    std::string m_path;
    std::string m_tmp_path;
    unsigned m_mode;
    int m_fd = -1;
    int m_errno = 0;
    const char* m_failed = "cannot write";  // what was being done when m_errno was set
    bool m_committed = false;
    WriteBuffer m_buffer;
};

}  // namespace lookup
