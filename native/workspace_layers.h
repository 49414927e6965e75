// The workspace draft source in layers: the folder table on disk (its bulk, written at one
// moment), plus what changed since in memory (`added`: the files whose current text the table
// does not hold), less the table's part of those files (`removed`). A key's followers are
// table + added - removed, per follower, never below zero. Without a table, `added` is the
// whole workspace cache and find() returns its spans as they are.
#pragma once

#include "folder_table.h"
#include "ngram_cache.h"

#include <vector>

namespace lookup {

struct WorkspaceLayers {
    const NgramCache* added = nullptr;
    const NgramCache* removed = nullptr;
    const FolderTable* table = nullptr;

    [[nodiscard]] bool empty() const { return added == nullptr && table == nullptr; }

    // A span valid until the next find() on this thread (a merged one lives in a per-thread
    // buffer that only grows, so the hot path allocates nothing once warm).
    [[nodiscard]] FollowerSpan find(NgramKey key) const;
    void prefetch(NgramKey key) const {
        if (added != nullptr) added->prefetch(key);
        if (table != nullptr) table->prefetch(key);
    }
};

}  // namespace lookup
