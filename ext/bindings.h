// Python bindings of the native lookup core: argument checks, locking and numpy conversion only.
// One file per bound type (module.cpp holds the module itself); this header holds what more than
// one of them needs. Its types live in a named namespace, not an anonymous one: pybind11 finds a
// bound class by its C++ type, so every file must see the same PyNgramCache.
#pragma once

#include "drafter.h"
#include "folder_table.h"
#include "ngram_cache.h"
#include "static_cache.h"
#include "static_cache_format.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
// In every file, not only those that convert std::vector or std::optional: a file without it
// would define another caster for the same types (an ODR violation).
#include <pybind11/stl.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <optional>
#include <vector>

namespace py = pybind11;

namespace lookup_ext {

using lookup::token_t;

using TokenArray = py::array_t<token_t, py::array::c_style | py::array::forcecast>;

// Raised as lookahead_lsp._lookup.CacheError: "<path>: <reason>".
struct CacheError : std::runtime_error {
    CacheError(const std::string& path, const std::string& reason) : std::runtime_error(path + ": " + reason) {}
};

[[noreturn]] void raise_os_error(const std::string& path, const std::string& reason);

// Token ids from any array-like: integers only, 1-D, within int32 (checked before narrowing, so
// that 2**32 + 5 is refused rather than read as 5). int32 input is used without a copy.
TokenArray as_tokens(const py::object& token_ids);

void check_tokens(const token_t* tokens, size_t n, uint32_t n_vocab);

uint32_t checked_vocab(int64_t n_vocab);

// A mutable cache with its vocabulary size and a reader/writer lock: the daemon drafts on one
// thread while its index thread adds and removes files.
struct PyNgramCache {
    explicit PyNgramCache(int64_t vocab) : n_vocab(checked_vocab(vocab)) {}

    lookup::NgramCache cache;
    uint32_t n_vocab;
    mutable std::shared_mutex mutex;
};

// The cache's bytes (a private copy or a mapping) are shared with every follower view handed to
// numpy, so close() (or the cache being collected) never frees memory an array still shows. The
// lock keeps close() from racing a drafting call on another thread.
struct PyStaticCache {
    std::shared_ptr<lookup::StaticCache> cache = std::make_shared<lookup::StaticCache>();
    std::string path;
    std::atomic<bool> verified{false};
    mutable std::shared_mutex mutex;

    // Call these with `mutex` held (shared or exclusive).
    const lookup::StaticCache& open_cache() const {
        if (!cache) throw py::value_error(path + ": static cache is closed");
        return *cache;
    }
    // Drafting and export read followers that only verify() has checked.
    const lookup::StaticCache& verified_cache() const {
        const lookup::StaticCache& open = open_cache();
        if (!verified.load()) throw py::value_error(path + ": static cache not verified yet (call verify() first)");
        return open;
    }
};

// A folder table never changes once open; the shared pointer keeps it mapped while a drafting
// call on another thread reads it.
struct PyFolderTable {
    std::shared_ptr<lookup::FolderTable> table = std::make_shared<lookup::FolderTable>();
    std::string path;
};

// The workspace draft source in its layers (workspace_layers.h); holds its parts alive.
struct PyWorkspaceView {
    py::object added_object, removed_object, table_object;
    PyNgramCache* added = nullptr;
    PyNgramCache* removed = nullptr;
    PyFolderTable* table = nullptr;
    uint32_t n_vocab = 0;
};

// What a `workspace` argument names: None, an NgramCache (the whole workspace) or a view.
struct WorkspaceArg {
    PyNgramCache* added = nullptr;
    PyNgramCache* removed = nullptr;
    PyFolderTable* table = nullptr;
    uint32_t n_vocab = 0;

    [[nodiscard]] bool given() const { return added != nullptr || table != nullptr; }
};

// Shared locks on the mutable sources for the length of one drafting call.
struct LockedSources {
    LockedSources(PyNgramCache* context, const WorkspaceArg& workspace, PyStaticCache* repository);

    lookup::DraftCaches sources;
    std::shared_lock<std::shared_mutex> context_lock;
    std::shared_lock<std::shared_mutex> workspace_lock;
    std::shared_lock<std::shared_mutex> removed_lock;
    std::shared_lock<std::shared_mutex> repository_lock;
};

// A followers() key: 1 to 4 tokens (ValueError otherwise); none, which has no followers, when a
// token is outside the vocabulary.
std::optional<lookup::NgramKey> checked_key(const std::vector<int64_t>& key, uint32_t n_vocab);
py::array_t<token_t> followers_copy(const lookup::FollowerSpan& span);

py::dict header_dict(const lookup::StaticHeader& h);

// (keys (K, 4), offsets (K + 1), followers (F, 2)) sorted by key, for tests and tools.
struct CacheArrays {
    std::vector<lookup::NgramKey> keys;
    std::vector<std::vector<lookup::Follower>> followers;

    void add(lookup::NgramKey key, const lookup::FollowerSpan& span);
    py::tuple to_numpy() const;
};

// Called in this order: a docstring names a bound type (draft's `context: NgramCache`) only if
// that type was bound before it.
void bind_ngram_cache(py::module_& m);
void bind_static_cache(py::module_& m);
void bind_builder(py::module_& m);
void bind_folder_table(py::module_& m);
void bind_drafting(py::module_& m);
void bind_pass_interrupt(py::module_& m);
void bind_vocabulary_texts(py::module_& m);
void bind_text_windows(py::module_& m);

}  // namespace lookup_ext
